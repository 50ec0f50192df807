package channel

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"palisade.dev/palisade/config/agentwire"
)

// FuzzHeartbeatBody checks what the server does with a heartbeat body an agent sends: decoded
// as the server decodes it, a report validate accepts becomes a heartbeat within the documented
// bounds (ports in range, at most MaxPeers peers and probing peers, a non-negative interval, no
// peer time after its receipt); a refused one says why; the verdict is the same every time.
func FuzzHeartbeatBody(f *testing.F) {
	for _, s := range []string{
		`{"node":"n1","bootID":"b","seq":1,"kubeletHealthy":true,"intervalMillis":1000,"sentAt":"2026-01-02T03:04:05Z"}`,
		`{"node":"n1","peers":[{"node":"n2","at":"2026-01-02T03:04:04Z"}],"probePort":9443,"probeHost":"10.0.0.1"}`,
		`{"node":"n1","executor":{"id":"c1","state":"Confirmed"},"runningContainers":0}`,
		`{"node":"n1","peers":[{"node":"","at":"2026-01-02T03:04:04Z"}]}`,
		`{"node":"n1","intervalMillis":-1}`,
		`{"node":"n1","intervalMillis":9223372036854775807}`,
		`{"node":"n1","probePort":70000}`,
		`{"node":"n1","probeHost":"example.com"}`,
		`{"node":"n1","runningContainers":-3}`,
		`{"node":"n1","sentAt":"0001-01-01T00:00:01Z","peers":[{"node":"n2","at":"9999-12-31T23:59:59Z"}]}`,
		`{"node":"n1","sentAt":"2026-01-02T03:04:05Z","probedBy":[{"node":"n3","reachable":true,"at":"2026-01-02T03:04:06Z"}]}`,
		`{"node":"n1","probedBy":[{"node":"","at":"2026-01-02T03:04:04Z"}]}`,
		`null`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		var rep agentwire.Report
		if err := json.NewDecoder(io.LimitReader(bytes.NewReader(body), agentwire.MaxBodyBytes)).Decode(&rep); err != nil {
			return
		}
		err := validate(rep)
		if again := validate(rep); (err == nil) != (again == nil) {
			t.Fatalf("validate(%s) is not deterministic: %v then %v", body, err, again)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("validate(%s): empty error message", body)
			}
			return
		}
		hb := toHeartbeat(rep, now, now.Add(time.Hour))
		if hb.Interval < 0 {
			t.Fatalf("an accepted report gives a negative interval %v: %s", hb.Interval, body)
		}
		if hb.RunningContainers != nil && *hb.RunningContainers < 0 {
			t.Fatalf("an accepted report gives %d running containers: %s", *hb.RunningContainers, body)
		}
		if len(hb.Peers) > agentwire.MaxPeers || len(hb.ProbedBy) > agentwire.MaxPeers || rep.ProbePort < 0 || rep.ProbePort > 65535 || rep.KubeletPort < 0 || rep.KubeletPort > 65535 {
			t.Fatalf("an accepted report is out of bounds: %s", body)
		}
		for _, p := range append(slices.Clone(hb.Peers), hb.ProbedBy...) {
			if p.Node == "" || p.At.After(now) {
				t.Fatalf("peer %+v of an accepted report is unnamed or after its receipt: %s", p, body)
			}
		}
		if diff := cmp.Diff(hb, toHeartbeat(rep, now, now.Add(time.Hour))); diff != "" {
			t.Fatalf("toHeartbeat is not deterministic (-want +got):\n%s", diff)
		}
	})
}
