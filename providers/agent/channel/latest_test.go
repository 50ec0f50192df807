package channel

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"palisade.dev/palisade/config/agentwire"
)

// TestLatestMatchesSnapshot: after every heartbeat and every Forget of a random history (peers
// that come and go, a node reporting the same peer twice, reports about nodes that never
// heartbeat), the index Latest reads gives what a full Snapshot gives for every node, and
// EachReceived visits exactly the snapshot's nodes with their arrival times and intervals.
func TestLatestMatchesSnapshot(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	names := make([]string, 12)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i)
	}
	s := &Server{log: logr.Discard(), dg: newDatagramState(), nodes: map[string]agentwire.Heartbeat{}, commands: map[string]agentwire.Command{},
		statuses: map[string]agentwire.ExecutorStatus{}, about: map[string]map[string][]agentwire.PeerReport{}, peers: newPeerBook(3)}
	for step := range 2000 {
		node := names[rng.IntN(len(names))]
		if rng.IntN(10) == 0 {
			s.Forget(node)
		} else {
			hb := agentwire.Heartbeat{Node: node, Seq: uint64(step), Received: t0.Add(time.Duration(step) * time.Millisecond),
				Interval: time.Duration(rng.IntN(3)) * time.Second}
			for range rng.IntN(5) {
				peer := names[rng.IntN(len(names))] + []string{"", "-gone"}[rng.IntN(2)]
				hb.Peers = append(hb.Peers, agentwire.PeerReport{Node: peer, Reachable: rng.IntN(2) == 0, At: hb.Received})
			}
			s.record(hb)
		}
		snap := s.Snapshot()
		type arrival struct {
			Received time.Time
			Interval time.Duration
		}
		wantArrivals, gotArrivals := map[string]arrival{}, map[string]arrival{}
		agentwire.EachReceivedOf(snap, func(n string, r time.Time, i time.Duration) { wantArrivals[n] = arrival{r, i} })
		s.EachReceived(func(n string, r time.Time, i time.Duration) { gotArrivals[n] = arrival{r, i} })
		if diff := cmp.Diff(wantArrivals, gotArrivals); diff != "" {
			t.Fatalf("step %d: EachReceived differs from the snapshot's (-want +got):\n%s", step, diff)
		}
		for _, n := range append(names, "n3-gone", "nowhere") {
			wantHB, wantAbout, wantOK := agentwire.LatestOf(snap, n)
			gotHB, gotAbout, gotOK := s.Latest(n)
			if diff := cmp.Diff(struct {
				HB    agentwire.Heartbeat
				About []agentwire.Sighting
				OK    bool
			}{wantHB, sorted(wantAbout), wantOK}, struct {
				HB    agentwire.Heartbeat
				About []agentwire.Sighting
				OK    bool
			}{gotHB, sorted(gotAbout), gotOK}); diff != "" {
				t.Fatalf("step %d, node %s: Latest differs from the snapshot's (-want +got):\n%s", step, n, diff)
			}
		}
	}
	if len(s.about) == 0 {
		t.Fatal("the history left no report indexed: it did not exercise the index")
	}
}

func sorted(about []agentwire.Sighting) []agentwire.Sighting {
	sort.Slice(about, func(i, j int) bool {
		a, b := about[i], about[j]
		if a.From != b.From {
			return a.From < b.From
		}
		if a.Reachable != b.Reachable {
			return !a.Reachable
		}
		return a.At.Before(b.At)
	})
	return about
}
