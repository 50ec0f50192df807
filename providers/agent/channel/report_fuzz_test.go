package channel

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"palisade.dev/palisade/config/agentwire"
)

// A heartbeat body is decoded and validated as the server does; an accepted one becomes a
// Heartbeat whose peer reports never lie in the controller's future, however the agent's clock
// and its reports' times are skewed, and whose interval is not negative.
func FuzzHeartbeatReport(f *testing.F) {
	for _, s := range []string{
		`{"node":"n1","bootID":"b","seq":1,"kubeletHealthy":true,"peers":[{"node":"n2","at":"2026-11-23T05:00:00Z","reached":true}],"sentAt":"2026-11-23T05:00:01Z","probePort":9443,"probeHost":"10.0.0.1","kubeletPort":10250}`,
		`{"node":"n1","peers":[{"node":"","at":"2026-11-23T05:00:00Z"}]}`,
		`{"node":"n1","intervalMillis":-5}`,
		`{"node":"n1","intervalMillis":9223372036854775807}`,
		`{"node":"n1","probePort":70000}`,
		`{"node":"n1","probeHost":"not-an-ip"}`,
		`{"node":"n1","peers":[{"node":"n2","at":"9999-01-01T00:00:00Z"}],"sentAt":"0001-01-01T00:00:01Z"}`,
		`{"node":"n1","executor":{"id":"c1","state":"Confirmed","pods":1,"containers":1},"runningContainers":0}`,
	} {
		f.Add([]byte(s))
	}
	now := time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		var rep agentwire.Report
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&rep); err != nil {
			return
		}
		if err := validate(rep); err != nil {
			if err.Error() == "" {
				t.Fatal("a rejection without a message")
			}
			return
		}
		if len(rep.Peers) > agentwire.MaxPeers || rep.IntervalMillis < 0 {
			t.Fatalf("validate accepted %d peers, interval %d", len(rep.Peers), rep.IntervalMillis)
		}
		hb := toHeartbeat(rep, now, now.Add(time.Hour))
		if len(hb.Peers) != len(rep.Peers) || hb.Interval < 0 || !hb.Received.Equal(now) {
			t.Fatalf("heartbeat %+v from report %+v", hb, rep)
		}
		for _, p := range hb.Peers {
			if p.At.After(now) {
				t.Fatalf("peer report of %s at %s, after the controller's now %s", p.Node, p.At, now)
			}
		}
	})
}
