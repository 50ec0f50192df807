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
// heartbeat, probes by peers the nodes acknowledged), the index Latest reads gives what a full Snapshot gives for every node, and
// EachReceived visits exactly the snapshot's nodes with their arrival times and intervals.
func TestLatestMatchesSnapshot(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	names := make([]string, 12)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i)
	}
	s := bareServer()
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
			for range rng.IntN(3) {
				prober := names[rng.IntN(len(names))] + []string{"", "-gone"}[rng.IntN(2)]
				hb.ProbedBy = append(hb.ProbedBy, agentwire.PeerReport{Node: prober, Reachable: true, At: hb.Received.Add(-time.Millisecond)})
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
			if got, least := s.LastReached(n), agentwire.LastReachedOf(snap, n); got.Before(least) {
				t.Fatalf("step %d, node %s: LastReached %s, before the snapshot's latest acknowledgement %s", step, n, got, least)
			}
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
		if a.Inbound != b.Inbound {
			return !a.Inbound
		}
		return a.At.Before(b.At)
	})
	return about
}

// A node's report of the probes it acknowledged is a sighting of each prober, inbound, on the
// server's clock: the prober's only path the controller sees when the prober itself is silent.
func TestProbedByIsASightingOfTheProber(t *testing.T) {
	s := bareServer()
	skew := 3 * time.Second // n2's clock is 3 s behind the server's
	rep := agentwire.Report{Node: "n2", SentAt: t0.Add(-skew),
		Peers:    []agentwire.PeerReport{{Node: "n1", Reachable: false, At: t0.Add(-skew - 200*time.Millisecond)}},
		ProbedBy: []agentwire.PeerReport{{Node: "n1", Reachable: true, At: t0.Add(-skew - 500*time.Millisecond)}}}
	if err := validate(rep); err != nil {
		t.Fatal(err)
	}
	s.record(toHeartbeat(rep, t0, t0.Add(time.Hour)))
	_, about, ok := s.Latest("n1")
	want := []agentwire.Sighting{
		{From: "n2", Reachable: false, At: t0.Add(-200 * time.Millisecond)},
		{From: "n2", Reachable: true, At: t0.Add(-500 * time.Millisecond), Inbound: true},
	}
	if diff := cmp.Diff(want, sorted(about)); ok || diff != "" {
		t.Errorf("about n1 (no heartbeat of its own: %t) (-want +got):\n%s", !ok, diff)
	}
	if got := s.LastReached("n1"); !got.Equal(t0.Add(-500 * time.Millisecond)) {
		t.Errorf("LastReached(n1) = %s, want the acknowledgement on the server's clock", got)
	}
	s.record(toHeartbeat(agentwire.Report{Node: "n2", SentAt: t0.Add(time.Second)}, t0.Add(time.Second), t0.Add(time.Hour)))
	if _, about, _ := s.Latest("n1"); len(about) != 0 {
		t.Errorf("about n1 after n2's next heartbeat without it: %+v, want nothing", about)
	}
	// The acknowledgement is remembered past the heartbeats that carried it: n1's agent counts
	// it as a path for two of its own intervals, whatever n2's.
	if got := s.LastReached("n1"); !got.Equal(t0.Add(-500 * time.Millisecond)) {
		t.Errorf("LastReached(n1) after n2 stopped reporting it = %s, want it kept", got)
	}
	s.opts.Now = func() time.Time { return t0.Add(59 * time.Minute) }
	s.Forget("n3")
	if got := s.LastReached("n1"); got.IsZero() {
		t.Error("LastReached(n1) dropped by a Forget less than an hour after it")
	}
	s.opts.Now = func() time.Time { return t0.Add(time.Hour + time.Second) }
	s.Forget("n3")
	if got := s.LastReached("n1"); !got.IsZero() {
		t.Errorf("LastReached(n1) = %s after a Forget more than an hour after it, want it dropped", got)
	}
}

// bareServer is a Server without a listener, for record and Latest.
func bareServer() *Server {
	return &Server{log: logr.Discard(), noisy: newLineLimit(logr.Discard(), linesPerSecond), dg: newDatagramState(), nodes: map[string]agentwire.Heartbeat{}, clocks: map[string]sendClock{}, commands: map[string]agentwire.Command{},
		statuses: map[string]agentwire.ExecutorStatus{}, about: map[string]map[string][]agentwire.Sighting{}, peers: newPeerBook(3)}
}
