package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"

	"palisade.dev/palisade/config/agentwire"
)

type fakeExchanger struct {
	resp agentwire.Response
	err  error
	sent []agentwire.Report
}

func (f *fakeExchanger) Exchange(_ context.Context, r agentwire.Report) (agentwire.Response, error) {
	f.sent = append(f.sent, r)
	return f.resp, f.err
}

type fakeOrders struct {
	handled []string
	// status, when set, is what Status returns, after calling it (when set).
	status   *agentwire.ExecutorStatus
	onStatus func()
}

func (f *fakeOrders) Status() *agentwire.ExecutorStatus {
	if f.onStatus != nil {
		f.onStatus()
	}
	return f.status
}
func (f *fakeOrders) ReadBack(context.Context) *int { return nil }
func (f *fakeOrders) Handle(_ context.Context, c agentwire.Command) {
	f.handled = append(f.handled, c.ID)
}
func (f *fakeOrders) Changed() <-chan struct{} { return nil }

type fakeProber struct {
	targets  []string
	interval time.Duration
	// acknowledged is what AnyAcknowledged answers; probedBy what ProbedBy returns, and
	// probedByWithin the window it was last asked for.
	acknowledged   bool
	probedBy       []agentwire.PeerReport
	probedByWithin time.Duration
}

func (f *fakeProber) Reports() []agentwire.PeerReport { return []agentwire.PeerReport{} }
func (f *fakeProber) SetTargets(ts []agentwire.PeerTarget) {
	f.targets = nil
	for _, t := range ts {
		f.targets = append(f.targets, t.Node)
	}
}
func (f *fakeProber) SetInterval(d time.Duration)        { f.interval = d }
func (f *fakeProber) AnyAcknowledged(time.Duration) bool { return f.acknowledged }
func (f *fakeProber) ProbedBy(within time.Duration) []agentwire.PeerReport {
	f.probedByWithin = within
	return f.probedBy
}

type fakeFencer struct {
	seen   []Reachability
	api    bool          // what ProbeAPIServer answers
	within time.Duration // what Within answers
}

func (f *fakeFencer) Within() time.Duration { return f.within }

func (f *fakeFencer) ProbeAPIServer(context.Context) bool { return f.api }
func (f *fakeFencer) Observe(_ context.Context, r Reachability, _ time.Time) {
	f.seen = append(f.seen, r)
}

type refusal403 struct{}

func (refusal403) Error() string   { return "heartbeat rejected: 403" }
func (refusal403) StatusCode() int { return http.StatusForbidden }

// TestBeat: one heartbeat round hands the controller's answer on (the interval only within
// 100ms..1m, the peers, the command), and tells the self-fencer that the controller was reached
// only when it accepted the heartbeat.
func TestBeat(t *testing.T) {
	kubelet := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer kubelet.Close()
	answer := agentwire.Response{IntervalMillis: 500, Peers: []agentwire.PeerTarget{{Node: "b", Addresses: []string{"10.0.0.2:9444"}}},
		Command: &agentwire.Command{ID: "c1", Action: agentwire.ActionTerminate}}
	type outcome struct {
		Interval, ProbeInterval time.Duration
		Targets, Handled        []string
		Seen                    []Reachability
	}
	for _, tc := range []struct {
		name string
		resp agentwire.Response
		err  error
		want outcome
	}{
		{"accepted", answer, nil, outcome{Interval: 500 * time.Millisecond, ProbeInterval: 500 * time.Millisecond,
			Targets: []string{"b"}, Handled: []string{"c1"}, Seen: []Reachability{{Controller: true}}}},
		{"interval out of range ignored", agentwire.Response{IntervalMillis: 10}, nil,
			outcome{Interval: time.Second, Seen: []Reachability{{Controller: true}}}},
		// An error comes without an answer, as from channel.Client.
		// A refused heartbeat (a bad or expired certificate) is no signal at the controller, so
		// it does not count as reaching it: else a node whose kubelet is down and whose peers
		// are cut would never fence itself while the controller, hearing nothing, relies on it.
		{"refused: no signal at the controller", agentwire.Response{}, fmt.Errorf("sending: %w", refusal403{}),
			outcome{Interval: time.Second, Seen: []Reachability{{}}}},
		{"unreachable", agentwire.Response{}, errors.New("connection refused"),
			outcome{Interval: time.Second, Seen: []Reachability{{}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, o, p, f := &fakeExchanger{resp: tc.resp, err: tc.err}, &fakeOrders{}, &fakeProber{}, &fakeFencer{within: 150 * time.Second}
			h := New(Config{Node: "a", BootID: "boot", Interval: time.Second, CallTimeout: time.Second, KubeletHealthz: kubelet.URL,
				ProbePort: 9444, KubeletPort: 10250}, x, o, f, p, logr.Discard())
			h.beat(t.Context())
			got := outcome{Interval: h.interval, ProbeInterval: p.interval, Targets: p.targets, Handled: o.handled, Seen: f.seen}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
			if len(x.sent) != 1 {
				t.Fatalf("%d reports sent, want 1", len(x.sent))
			}
			r := x.sent[0]
			if r.Node != "a" || r.BootID != "boot" || r.Seq != 1 || !r.KubeletHealthy || r.ProbePort != 9444 || r.KubeletPort != 10250 || r.IntervalMillis != 1000 ||
				r.SelfFenceWithinMillis != 150_000 {
				t.Errorf("report %+v", r)
			}
			// Seq orders one process's heartbeats: each Heartbeater names itself apart.
			again := New(Config{Node: "a", BootID: "boot", Interval: time.Second}, x, o, f, p, logr.Discard())
			if r.Instance == "" || len(r.Instance) > agentwire.MaxInstance || r.Instance == again.instance {
				t.Errorf("report's Instance %q, another Heartbeater's %q: want each its own, at most %d bytes", r.Instance, again.instance, agentwire.MaxInstance)
			}
		})
	}
}

// The self-fencer's reachability is what the controller hears: the API server counts only with
// a healthy kubelet (whose Lease renewals are the controller's signal on that path).
func TestReachabilityIsWhatTheControllerHears(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		sent, api, kubelet, peers bool
		want                      Reachability
	}{
		{"everything", true, true, true, true, Reachability{Controller: true, API: true, Peers: true}},
		{"API server answers, kubelet down: silent on the API path", false, true, false, false, Reachability{}},
		{"API server answers, kubelet healthy", false, true, true, false, Reachability{API: true}},
		{"kubelet healthy, API server unreachable", false, false, true, false, Reachability{}},
		{"controller accepted the heartbeat", true, false, false, false, Reachability{Controller: true}},
		{"a peer only", false, false, false, true, Reachability{Peers: true}},
	} {
		if got := reachability(tc.sent, tc.api, tc.kubelet, tc.peers); got != tc.want {
			t.Errorf("%s: reachability = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// A round in which the API server answers the agent's probe but the kubelet does not answer
// healthy tells the self-fencer that the API server is not reached: the controller hears that
// path only by the kubelet's Lease renewals.
func TestBeatAPIServerCountsOnlyWithAHealthyKubelet(t *testing.T) {
	for _, healthy := range []bool{true, false} {
		kubelet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if !healthy {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}))
		x, f := &fakeExchanger{err: errors.New("connection refused")}, &fakeFencer{api: true}
		h := New(Config{Node: "a", BootID: "boot", Interval: time.Second, CallTimeout: time.Second, KubeletHealthz: kubelet.URL},
			x, &fakeOrders{}, f, &fakeProber{}, logr.Discard())
		h.beat(t.Context())
		kubelet.Close()
		if want := []Reachability{{API: healthy}}; !slices.Equal(f.seen, want) {
			t.Errorf("kubelet healthy %t: the self-fencer saw %+v, want %+v", healthy, f.seen, want)
		}
	}
}

// A heartbeat tells the controller which peers' probes the agent acknowledged (the controller's
// only sight of those paths), over the same window in which those peers count this node as a
// path; and a peer counts as a path for the self-fencer only when its agent acknowledged.
func TestBeatCarriesThePeersItAnswered(t *testing.T) {
	kubelet := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer kubelet.Close()
	at := time.Date(2026, 11, 27, 16, 0, 0, 0, time.UTC)
	for _, acknowledged := range []bool{true, false} {
		x, f := &fakeExchanger{err: errors.New("connection refused")}, &fakeFencer{}
		p := &fakeProber{acknowledged: acknowledged, probedBy: []agentwire.PeerReport{{Node: "c", Reachable: true, At: at}}}
		h := New(Config{Node: "a", BootID: "boot", Interval: time.Second, CallTimeout: time.Second, KubeletHealthz: kubelet.URL},
			x, &fakeOrders{}, f, p, logr.Discard())
		h.beat(t.Context())
		if want := []Reachability{{Peers: acknowledged}}; !slices.Equal(f.seen, want) {
			t.Errorf("a peer's agent acknowledged: %t: the self-fencer saw %+v, want %+v", acknowledged, f.seen, want)
		}
		if len(x.sent) != 1 || !slices.Equal(x.sent[0].ProbedBy, p.probedBy) {
			t.Errorf("reports %+v, want one carrying probedBy %+v", x.sent, p.probedBy)
		}
		if p.probedByWithin != pathWindow*time.Second {
			t.Errorf("probes answered within %s reported, want %d intervals", p.probedByWithin, pathWindow)
		}
	}
}

// A report whose order says the agent stopped the kubelet carries a kubelet probe taken after
// the status was read, never one from before the stop: the controller reads a healthy kubelet
// beside a stopped one as a kubelet started again, and watches the workload minutes longer.
func TestBeatProbesTheKubeletAfterReadingTheOrder(t *testing.T) {
	var stopped atomic.Bool
	kubelet := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if stopped.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer kubelet.Close()
	// The executor stops the kubelet and confirms between the heartbeat's start and its read of
	// the order's status.
	o := &fakeOrders{status: &agentwire.ExecutorStatus{ID: "f1/executor", State: agentwire.ExecutorConfirmed, KubeletStopped: true},
		onStatus: func() { stopped.Store(true) }}
	x := &fakeExchanger{}
	h := New(Config{Node: "a", BootID: "boot", Interval: time.Second, CallTimeout: time.Second, KubeletHealthz: kubelet.URL}, x, o, nil, nil, logr.Discard())
	h.beat(t.Context())
	if len(x.sent) != 1 {
		t.Fatalf("%d reports sent, want 1", len(x.sent))
	}
	if r := x.sent[0]; r.Executor == nil || !r.Executor.KubeletStopped || r.KubeletHealthy {
		t.Errorf("report: kubelet healthy %t beside executor status %+v; want a stopped kubelet seen unhealthy", r.KubeletHealthy, r.Executor)
	}
}

// An agent asked for a longer interval sends one heartbeat at once, reporting it, so that the
// controller learns it now rather than one new interval later; asked for a shorter one, it
// waits for its next tick as before.
func TestRunReportsALongerIntervalAtOnce(t *testing.T) {
	kubelet := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer kubelet.Close()
	for _, tc := range []struct {
		asked int64
		want  []int64 // the intervals the reports sent within 300 ms state
	}{{30_000, []int64{1000, 30_000}}, {500, []int64{1000}}} {
		x := &fakeExchanger{resp: agentwire.Response{IntervalMillis: tc.asked}}
		h := New(Config{Node: "a", Interval: time.Second, CallTimeout: time.Second, KubeletHealthz: kubelet.URL}, x, &fakeOrders{}, nil, nil, logr.Discard())
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		h.Run(ctx)
		cancel()
		var got []int64
		for _, r := range x.sent {
			got = append(got, r.IntervalMillis)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("asked %d ms: intervals reported (-want +got):\n%s", tc.asked, diff)
		}
	}
}

// A self-fence slower than the controller takes (more than a day) is reported as none, so that
// the controller neither refuses every heartbeat nor relies on it, and the agent says so once.
func TestBeatReportsASelfFenceTooSlowAsNone(t *testing.T) {
	kubelet := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer kubelet.Close()
	x := &fakeExchanger{}
	var warnings []string
	log := funcr.New(func(_, args string) {
		if strings.Contains(args, "exceeds what the controller takes") {
			warnings = append(warnings, args)
		}
	}, funcr.Options{})
	h := New(Config{Node: "a", Interval: time.Second, CallTimeout: time.Second, KubeletHealthz: kubelet.URL}, x, &fakeOrders{},
		&fakeFencer{within: 25 * time.Hour}, &fakeProber{}, log)
	h.beat(t.Context())
	h.beat(t.Context())
	if len(x.sent) != 2 || x.sent[0].SelfFenceWithinMillis != 0 || x.sent[1].SelfFenceWithinMillis != 0 {
		t.Errorf("reports %+v, want two with no self-fence time", x.sent)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "25h0m0s") {
		t.Errorf("warnings %q, want one naming the 25h promise", warnings)
	}
}

// Farewell sends one more heartbeat, promising no self-fence, and says whether the controller
// took it.
func TestFarewellWithdrawsThePromise(t *testing.T) {
	kubelet := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer kubelet.Close()
	x := &fakeExchanger{}
	h := New(Config{Node: "a", BootID: "b", Interval: time.Second, CallTimeout: time.Second, KubeletHealthz: kubelet.URL}, x, &fakeOrders{},
		&fakeFencer{within: 30 * time.Second}, &fakeProber{}, logr.Discard())
	h.beat(t.Context())
	if !h.Farewell(time.Second) {
		t.Error("Farewell = false, want true (the controller took it)")
	}
	if len(x.sent) != 2 || x.sent[0].SelfFenceWithinMillis != 30_000 || x.sent[1].SelfFenceWithinMillis != 0 ||
		x.sent[1].Seq != x.sent[0].Seq+1 || x.sent[1].Instance != x.sent[0].Instance || x.sent[1].BootID != "b" {
		t.Errorf("reports %+v, want a beat promising 30 s, then a farewell promising none, the next of the same instance", x.sent)
	}
	x.err = errors.New("unreachable")
	if h.Farewell(time.Second) {
		t.Error("Farewell = true when the controller did not take it")
	}
}
