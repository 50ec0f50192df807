package scenario

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"palisade.dev/palisade/config/agentwire"
)

func TestHeardMissing(t *testing.T) {
	beat := func(node string, reached ...string) agentwire.Heartbeat {
		hb := agentwire.Heartbeat{Node: node, Interval: time.Second}
		for _, r := range reached {
			hb.Peers = append(hb.Peers, agentwire.PeerReport{Node: r, Reachable: true, At: time.Unix(1, 0)})
		}
		hb.Peers = append(hb.Peers, agentwire.PeerReport{Node: "unreached", At: time.Unix(1, 0)})
		return hb
	}
	nodes := []string{"a", "b", "c"}
	tests := []struct {
		name  string
		beats []agentwire.Heartbeat
		want  []string
	}{
		{name: "nothing heard", want: []string{
			"a: 0 of 2 heartbeats accepted, reached by 0 of 2 peers",
			"b: 0 of 2 heartbeats accepted, reached by 0 of 2 peers",
			"c: 0 of 2 heartbeats accepted, reached by 0 of 2 peers",
		}},
		{name: "heard, peers not yet probing", beats: []agentwire.Heartbeat{beat("a"), beat("a"), beat("b"), beat("b"), beat("c"), beat("c")}, want: []string{
			"a: 2 of 2 heartbeats accepted, reached by 0 of 2 peers",
			"b: 2 of 2 heartbeats accepted, reached by 0 of 2 peers",
			"c: 2 of 2 heartbeats accepted, reached by 0 of 2 peers",
		}},
		{name: "one peer short", beats: []agentwire.Heartbeat{beat("a", "b", "c"), beat("a"), beat("b", "c", "a"), beat("b"), beat("c", "a"), beat("c")}, want: []string{
			"b: 2 of 2 heartbeats accepted, reached by 1 of 2 peers",
		}},
		{name: "every agent heard, every node probed", beats: []agentwire.Heartbeat{beat("a", "b", "c"), beat("a"), beat("b", "c", "a"), beat("b"), beat("c", "a", "b"), beat("c")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHeard()
			for _, hb := range tt.beats {
				h.record(hb)
			}
			if diff := cmp.Diff(tt.want, h.missing(nodes, 2, 2)); diff != "" {
				t.Errorf("missing (-want +got):\n%s", diff)
			}
		})
	}
}
