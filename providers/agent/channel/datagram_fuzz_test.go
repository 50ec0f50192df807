package channel

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"palisade.dev/palisade/config/agentwire"
)

// FuzzHeartbeatDatagramServer: whatever datagram arrives, the server records a heartbeat only
// from one sealed under the node's key, only for that node, and answers nothing, "unknown
// key", or an answer authenticated under the key.
func FuzzHeartbeatDatagramServer(f *testing.F) {
	id := bytes.Repeat([]byte{0x42}, agentwire.DatagramKeyIDBytes)
	secret := bytes.Repeat([]byte{0x17}, agentwire.DatagramKeyBytes)
	for _, p := range []string{
		`{"node":"n1","seq":1}`, `{"node":"n2","seq":2}`, `{"node":"n1","seq":3,"intervalMillis":-5}`,
		`{"node":"n1","seq":4,"peers":[{"node":"n2","reachable":true,"at":"2026-01-02T03:04:04Z"}],"probePort":9444}`,
	} {
		b, _ := agentwire.SealHeartbeat(id, secret, []byte(p))
		f.Add(b)
	}
	f.Add([]byte("PHB1"))
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &Server{log: logr.Discard(), noisy: newLineLimit(logr.Discard(), linesPerSecond), nodes: map[string]agentwire.Heartbeat{}, clocks: map[string]sendClock{}, commands: map[string]agentwire.Command{},
			statuses: map[string]agentwire.ExecutorStatus{}, about: map[string]map[string][]agentwire.Sighting{},
			peers: newPeerBook(3), dg: newDatagramState(), opts: ServerOptions{Now: func() time.Time { return now }}}
		k := &datagramKey{node: "n1", secret: secret, mac: agentwire.NewDatagramMAC(secret), notAfter: now.Add(time.Hour)}
		copy(k.id[:], id)
		s.dg.byID[k.id], s.dg.byNode["n1"] = k, k
		s.dg.told["n1"] = peersHash(nil) // told no peers: n1 has no news unless its report brings some
		answer := s.handleDatagram(b, netip.MustParseAddrPort("192.0.2.1:5000"), now)
		_, sealed := agentwire.OpenHeartbeat(b, secret)
		hb, _, recorded := s.Latest("n1")
		if recorded && (sealed != nil || !bytes.Equal(b[4:4+agentwire.DatagramKeyIDBytes], id)) {
			t.Fatalf("recorded %+v from a datagram not sealed under n1's key: %x", hb, b)
		}
		if len(s.nodes) > 1 || (len(s.nodes) == 1 && !recorded) {
			t.Fatalf("recorded a heartbeat of another node than the key's: %v", s.nodes)
		}
		if answer == nil {
			return
		}
		if a, err := agentwire.OpenAnswer(answer, b[4:4+agentwire.DatagramKeyIDBytes], secret); err != nil {
			t.Fatalf("answered %x, which is neither unknown key nor authenticated: %v", answer, err)
		} else if exchange := a.Flags&agentwire.DatagramExchange != 0; !a.UnknownKey && exchange == recorded {
			t.Fatalf("answered %+v, yet recorded=%v: an accepted datagram is recorded unless the agent is asked to post it", a, recorded)
		}
	})
}
