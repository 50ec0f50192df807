package fencing

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/detectors/lease"
	"palisade.dev/palisade/detectors/observe"
)

// guarded is a policy whose storm guard is v (nil: the default).
func guarded(v *intstr.IntOrString) *v1alpha1.FencingPolicy {
	return &v1alpha1.FencingPolicy{Spec: v1alpha1.FencingPolicySpec{StormGuard: v1alpha1.StormGuard{MaxUnhealthy: v}}}
}

func intOrPct(s string) *intstr.IntOrString { v := intstr.Parse(s); return &v }

func TestMaxUnhealthy(t *testing.T) {
	tests := []struct {
		name  string
		guard *intstr.IntOrString
		nodes int
		want  int
	}{
		{"default 40% of 10", nil, 10, 4},
		{"default 40% of 3 rounds down", nil, 3, 1},
		{"default 40% of 1 is at least 1", nil, 1, 1},
		{"default of no nodes", nil, 0, 0},
		{"a count", intOrPct("3"), 10, 3},
		{"a count above the nodes", intOrPct("7"), 2, 7},
		{"a count of 0 forbids fencing", intOrPct("0"), 10, 0},
		{"0% forbids fencing", intOrPct("0%"), 10, 0},
		{"50% of 5 rounds down", intOrPct("50%"), 5, 2},
		{"5% of 10 is at least 1", intOrPct("5%"), 10, 1},
		{"100% of 7", intOrPct("100%"), 7, 7},
		{"a malformed percentage allows none", intOrPct("forty"), 10, 0},
		// Refused by the CRD's rule, stored before it: none, not the guard switched off.
		{"above 100% allows none", intOrPct("150%"), 10, 0},
		{"a count past the rule's allows none", intOrPct("1000001"), 10, 0},
		{"a negative count allows none", intOrPct("-1"), 10, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := maxUnhealthy(guarded(tt.guard), tt.nodes); got != tt.want {
				t.Errorf("maxUnhealthy(%v, %d nodes) = %d, want %d", tt.guard, tt.nodes, got, tt.want)
			}
		})
	}
}

func observed(node string, v detectors.Verdict) detectors.Observation {
	return detectors.Observation{Node: node, Verdict: v, Reason: "because " + node}
}

func listed(node string, v detectors.Verdict) v1alpha1.NodeVerdict {
	return v1alpha1.NodeVerdict{Node: node, Verdict: string(v), Reason: "because " + node}
}

func TestCountUnhealthy(t *testing.T) {
	var many []detectors.Observation
	var firstListed []v1alpha1.NodeVerdict
	var allNames []string
	for i := 59; i >= 0; i-- { // in reverse: the list is sorted by name
		many = append(many, observed(fmt.Sprintf("n%02d", i), detectors.Dead))
		allNames = append(allNames, fmt.Sprintf("n%02d", i))
	}
	for i := range v1alpha1.MaxUnhealthyListed {
		firstListed = append(firstListed, listed(fmt.Sprintf("n%02d", i), detectors.Dead))
	}
	tests := []struct {
		name   string
		guard  *intstr.IntOrString
		all    []detectors.Observation
		want   health
		blocks bool
	}{
		{name: "no nodes", want: health{}},
		{
			name: "all healthy", all: []detectors.Observation{observed("a", detectors.Healthy), observed("b", detectors.Healthy), observed("c", detectors.Healthy)},
			want: health{Nodes: 3, MaxUnhealthy: 1},
		},
		{
			name: "failed and late verdicts count, sorted by name",
			all: []detectors.Observation{
				observed("e", detectors.Suspect), observed("d", detectors.KubeletDown), observed("c", detectors.Healthy),
				observed("b", detectors.Partitioned), observed("a", detectors.Dead),
			},
			want: health{Nodes: 5, Unhealthy: 4, MaxUnhealthy: 2, Failed: []string{"d", "b", "a"}, Listed: []v1alpha1.NodeVerdict{
				listed("a", detectors.Dead), listed("b", detectors.Partitioned), listed("d", detectors.KubeletDown), listed("e", detectors.Suspect),
			}},
			blocks: true,
		},
		{
			name: "as many as allowed does not block", guard: intOrPct("1"),
			all:  []detectors.Observation{observed("a", detectors.Dead), observed("b", detectors.Healthy)},
			want: health{Nodes: 2, Unhealthy: 1, MaxUnhealthy: 1, Failed: []string{"a"}, Listed: []v1alpha1.NodeVerdict{listed("a", detectors.Dead)}},
		},
		{
			name: "one more than allowed blocks", guard: intOrPct("1"),
			all:    []detectors.Observation{observed("a", detectors.Dead), observed("b", detectors.Suspect)},
			want:   health{Nodes: 2, Unhealthy: 2, MaxUnhealthy: 1, Failed: []string{"a"}, Listed: []v1alpha1.NodeVerdict{listed("a", detectors.Dead), listed("b", detectors.Suspect)}},
			blocks: true,
		},
		{
			name: "the list stops at MaxUnhealthyListed, the count does not", guard: intOrPct("100%"), all: many,
			want: health{Nodes: 60, Unhealthy: 60, MaxUnhealthy: 60, Failed: allNames, Listed: firstListed},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := countUnhealthy(tt.all, guarded(tt.guard))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("countUnhealthy (-want +got):\n%s", diff)
			}
			if got.Blocked() != tt.blocks {
				t.Errorf("Blocked() = %t, want %t", got.Blocked(), tt.blocks)
			}
		})
	}
}

func TestCountUnhealthyTruncatesReasons(t *testing.T) {
	long := strings.Repeat("x", 1023) + "éé"
	h := countUnhealthy([]detectors.Observation{{Node: "a", Verdict: detectors.Dead, Reason: long}}, guarded(nil))
	if got := h.Listed[0].Reason; got != long[:1023] {
		t.Errorf("reason cut to %d bytes (%q at the end), want 1023: 1024 would split a character", len(got), got[len(got)-3:])
	}
}

func TestPolicyFor(t *testing.T) {
	policy := func(name string, sel metav1.LabelSelector) *v1alpha1.FencingPolicy {
		return &v1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.FencingPolicySpec{NodeSelector: sel}}
	}
	all := policy("b-all", metav1.LabelSelector{})
	gpu := policy("a-gpu", metav1.LabelSelector{MatchLabels: map[string]string{"gpu": "true"}})
	broken := policy("0-broken", metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "gpu", Operator: "Resembles"}}})
	// A policy whose selector was "gpu=true" until an edit broke it: its last selector in force
	// still decides, so its nodes stay with it rather than fall to b-all.
	lastGPU := "gpu=true"
	brokenEdit := broken.DeepCopy()
	brokenEdit.Status.NodeSelector = &lastGPU
	lastAll := ""
	brokenAll := broken.DeepCopy()
	brokenAll.Status.NodeSelector = &lastAll
	tests := []struct {
		name     string
		policies []*v1alpha1.FencingPolicy
		labels   map[string]string
		want     string // "" for none
	}{
		{"no policy", nil, nil, ""},
		{"an empty selector selects every node", []*v1alpha1.FencingPolicy{all}, nil, "b-all"},
		{"a selector that does not match", []*v1alpha1.FencingPolicy{gpu}, map[string]string{"gpu": "false"}, ""},
		{"the first matching by name", []*v1alpha1.FencingPolicy{all, gpu}, map[string]string{"gpu": "true"}, "a-gpu"},
		{"the first by name only among those matching", []*v1alpha1.FencingPolicy{all, gpu}, nil, "b-all"},
		{"an invalid selector is skipped", []*v1alpha1.FencingPolicy{broken, all}, map[string]string{"gpu": "true"}, "b-all"},
		{"an invalid selector alone selects nothing", []*v1alpha1.FencingPolicy{broken}, map[string]string{"gpu": "true"}, ""},
		{"a broken edit keeps the nodes of the selector last in force", []*v1alpha1.FencingPolicy{brokenEdit, all}, map[string]string{"gpu": "true"}, "0-broken"},
		{"a broken edit takes no node its last selector did not", []*v1alpha1.FencingPolicy{brokenEdit, all}, map[string]string{"gpu": "false"}, "b-all"},
		{"a last selector in force of every node", []*v1alpha1.FencingPolicy{brokenAll, all}, nil, "0-broken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := fakeclient.NewClientBuilder().WithScheme(testScheme(t))
			for _, p := range tt.policies {
				b = b.WithObjects(p.DeepCopy())
			}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: tt.labels}}
			got, err := policyFor(context.Background(), b.Build(), node)
			if err != nil {
				t.Fatal(err)
			}
			name := ""
			if got != nil {
				name = got.Name
			}
			if name != tt.want {
				t.Errorf("policyFor = %q, want %q", name, tt.want)
			}
		})
	}
}

// TestHeartbeatIntervals: the interval asked of each node's agent is its policy's, the default
// under a policy without one, 0 without a policy or a node; each answer is remembered for the
// memo's TTL unless forgotten (the cache's events forget them: TestAgentIntervalsFollowTheAPI),
// with one read per node per TTL; nodes not asked about for a TTL are forgotten; an answer
// read while something was forgotten is not remembered.
func TestHeartbeatIntervals(t *testing.T) {
	fast := &v1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "a-fast"}, Spec: v1alpha1.FencingPolicySpec{
		NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"db": "true"}},
		Detection:    v1alpha1.Detection{HeartbeatInterval: &metav1.Duration{Duration: 3 * time.Second}},
	}}
	plain := &v1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "b-plain"}, Spec: v1alpha1.FencingPolicySpec{
		NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"web": "true"}},
	}}
	node := func(name string, labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	c := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(fast, plain,
		node("db1", map[string]string{"db": "true"}), node("web1", map[string]string{"web": "true"}), node("lone", nil)).Build()

	reads := map[string]int{}
	now := time.Unix(1000, 0)
	m := newIntervalMemo(func(n string) time.Duration { reads[n]++; return heartbeatInterval(c, n) }, func() time.Time { return now }, IntervalMemoTTL)
	for name, want := range map[string]time.Duration{"db1": 3 * time.Second, "web1": DefaultHeartbeatInterval, "lone": 0, "gone": 0} {
		if got := m.get(name); got != want {
			t.Errorf("interval of %s = %v, want %v", name, got, want)
		}
	}

	ctx := context.Background()
	changed := fast.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(fast), changed); err != nil {
		t.Fatal(err)
	}
	changed.Spec.Detection.HeartbeatInterval.Duration = 7 * time.Second
	if err := c.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	now = now.Add(IntervalMemoTTL - time.Millisecond)
	if got := m.get("db1"); got != 3*time.Second || reads["db1"] != 1 {
		t.Errorf("within the TTL: interval %v after %d reads, want the remembered 3s after 1", got, reads["db1"])
	}
	now = now.Add(time.Millisecond)
	if got := m.get("db1"); got != 7*time.Second || reads["db1"] != 2 {
		t.Errorf("once the TTL is over: interval %v after %d reads, want the changed policy's 7s after 2", got, reads["db1"])
	}

	now = now.Add(IntervalMemoTTL)
	m.get("web1")
	if _, kept := m.byNode["gone"]; kept || len(m.byNode) != 1 {
		t.Errorf("after a TTL unasked, the memo still holds %d nodes (gone kept: %v), want only web1", len(m.byNode), kept)
	}

	// Forgotten answers are read again at once; the others stay.
	m.get("db1")
	before := reads["db1"]
	m.forget("db1")
	m.get("db1")
	m.get("web1")
	if reads["db1"] != before+1 || reads["web1"] != 2 {
		t.Errorf("after forgetting db1: %d reads of db1 (want %d), %d of web1 (want 2, it stays remembered)", reads["db1"], before+1, reads["web1"])
	}
	m.forgetAll()
	m.get("db1")
	m.get("web1")
	if reads["db1"] != before+2 || reads["web1"] != 3 {
		t.Errorf("after forgetting all: %d reads of db1 (want %d), %d of web1 (want 3)", reads["db1"], before+2, reads["web1"])
	}

	// An answer read while something was forgotten may predate the change: it is returned but
	// not remembered.
	racing := newIntervalMemo(nil, func() time.Time { return now }, IntervalMemoTTL)
	racing.read = func(n string) time.Duration { reads[n]++; racing.forgetAll(); return heartbeatInterval(c, n) }
	before = reads["db1"]
	if got := racing.get("db1"); got != 7*time.Second {
		t.Errorf("interval read across a forget = %v, want 7s", got)
	}
	racing.get("db1")
	if reads["db1"] != before+2 {
		t.Errorf("an answer read across a forget was remembered: %d reads for two asks, want 2", reads["db1"]-before)
	}
}

// TestSelectorCache: a policy's parsed selector is reused while its generation stays, replaced
// when the spec changes (a new generation), an invalid selector's error is kept like a
// selector, policies without a UID are parsed every time, and the cache stays bounded.
func TestSelectorCache(t *testing.T) {
	var c selectorCache
	policy := func(uid string, gen int64, sel metav1.LabelSelector) *v1alpha1.FencingPolicy {
		return &v1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Generation: gen}, Spec: v1alpha1.FencingPolicySpec{NodeSelector: sel}}
	}
	db := metav1.LabelSelector{MatchLabels: map[string]string{"db": "true"}}
	web := metav1.LabelSelector{MatchLabels: map[string]string{"web": "true"}}
	broken := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "db", Operator: "Resembles"}}}
	matches := func(p *v1alpha1.FencingPolicy, l map[string]string) (bool, error) {
		sel, err := c.of(p)
		if err != nil {
			return false, err
		}
		return sel.Matches(labels.Set(l)), nil
	}
	dbNode, webNode := map[string]string{"db": "true"}, map[string]string{"web": "true"}
	steps := []struct {
		name    string
		p       *v1alpha1.FencingPolicy
		node    map[string]string
		want    bool
		wantErr bool
	}{
		{"first parse", policy("u1", 1, db), dbNode, true, false},
		{"same generation: the remembered selector", policy("u1", 1, web), dbNode, true, false},
		{"a new generation is parsed", policy("u1", 2, web), webNode, true, false},
		{"and replaces the old", policy("u1", 2, db), dbNode, false, false},
		{"an invalid selector fails", policy("u2", 1, broken), dbNode, false, true},
		{"and keeps failing in its generation", policy("u2", 1, db), dbNode, false, true},
		{"no UID: parsed", policy("", 1, db), dbNode, true, false},
		{"no UID: parsed again", policy("", 1, web), dbNode, false, false},
	}
	for _, st := range steps {
		got, err := matches(st.p, st.node)
		if got != st.want || (err != nil) != st.wantErr {
			t.Errorf("%s: matches %v, error %v; want %v, error %v", st.name, got, err, st.want, st.wantErr)
		}
	}
	for i := range 3 * maxCachedSelectors {
		if _, err := c.of(policy(fmt.Sprintf("many-%d", i), 1, db)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.byUID); n > maxCachedSelectors {
		t.Errorf("the cache holds %d selectors, want at most %d", n, maxCachedSelectors)
	}
}

// The storm guard counts the nodes a policy covers: those its selector matches that no policy
// before it by name covers (policyFor). "a-db" covers the 3 db nodes; "z-all" selects all 10
// and covers 7, of which 4 fail: 4 of 7 is over its 40 % (2), though 4 of 10 would not be.
func TestStormGuardCountsTheNodesItsPolicyCovers(t *testing.T) {
	var objs []client.Object
	for i := range 10 {
		name, pool, age := fmt.Sprintf("n%d", i), "web", time.Second
		if i < 3 {
			pool = "db"
		}
		if i >= 3 && i < 7 {
			age = time.Minute // failed
		}
		renew := metav1.NewMicroTime(t0.Add(-age))
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}}},
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: lease.Namespace, Name: name}, Spec: coordinationv1.LeaseSpec{RenewTime: &renew}})
	}
	db := poolPolicy(ipmiMethod)
	db.Name, db.Spec.NodeSelector = "a-db", metav1.LabelSelector{MatchLabels: map[string]string{"pool": "db"}}
	all := poolPolicy(ipmiMethod)
	all.Name, all.Spec.NodeSelector = "z-all", metav1.LabelSelector{}
	c := fakeclient.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objs, db, all)...).Build()
	h, err := policyHealth(context.Background(), observe.Observer{Reader: c}, all, t0)
	if err != nil {
		t.Fatal(err)
	}
	if h.Nodes != 7 || h.Unhealthy != 4 || h.MaxUnhealthy != 2 || !h.Blocked() {
		t.Errorf("z-all: %d nodes, %d unhealthy, limit %d, blocked %v; want 7, 4, 2, blocked", h.Nodes, h.Unhealthy, h.MaxUnhealthy, h.Blocked())
	}
	if h, err = policyHealth(context.Background(), observe.Observer{Reader: c}, db, t0); err != nil || h.Nodes != 3 || h.Unhealthy != 0 {
		t.Errorf("a-db: %d nodes, %d unhealthy (%v); want 3, 0", h.Nodes, h.Unhealthy, err)
	}
}
