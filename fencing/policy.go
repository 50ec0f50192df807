package fencing

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/detectors"
	"palisade.dev/palisade/detectors/observe"
)

// DefaultLeaseTimeout applies when a policy sets none: two missed kubelet renewals.
const DefaultLeaseTimeout = 20 * time.Second

// defaultMaxUnhealthy applies when a policy sets no storm guard.
var defaultMaxUnhealthy = intstr.FromString("40%")

// policyFor returns the policy covering node: of all whose selector matches, the first by name.
func policyFor(ctx context.Context, c client.Reader, node *corev1.Node, opts ...client.ListOption) (*v1alpha1.FencingPolicy, error) {
	var list v1alpha1.FencingPolicyList
	if err := c.List(ctx, &list, opts...); err != nil {
		return nil, fmt.Errorf("listing fencing policies: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	for i := range list.Items {
		sel, err := selectors.inForce(&list.Items[i])
		if err != nil {
			continue
		}
		if sel.Matches(labels.Set(node.Labels)) {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

// namedSelector is a policy's node selector in force, with the policy's name.
type namedSelector struct {
	policy string
	sel    labels.Selector
}

// policiesBefore are the node selectors in force of the policies before name (by name), in
// order: a node one of them matches is the first such policy's (policyFor).
func policiesBefore(ctx context.Context, c client.Reader, name string) ([]namedSelector, error) {
	var list v1alpha1.FencingPolicyList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing fencing policies: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	var out []namedSelector
	for i := range list.Items {
		if list.Items[i].Name >= name {
			continue
		}
		if sel, err := selectors.inForce(&list.Items[i]); err == nil {
			out = append(out, namedSelector{list.Items[i].Name, sel})
		}
	}
	return out, nil
}

// selectors remembers each policy's parsed node selector: parsing validates every key and
// value, and policyFor runs for every Lease renewal the node controller sees.
var selectors selectorCache

// selectorCache holds the parsed node selector of each policy by UID, for its generation (a
// change of the spec makes a new generation). Policies without a UID (not read from an API
// server) are parsed every time.
type selectorCache struct {
	mu    sync.Mutex
	byUID map[types.UID]parsedSelector
}

// maxCachedSelectors bounds the cache, far above any cluster's number of policies.
const maxCachedSelectors = 256

type parsedSelector struct {
	generation int64
	sel        labels.Selector
	err        error
}

func (c *selectorCache) of(p *v1alpha1.FencingPolicy) (labels.Selector, error) {
	if p.UID == "" {
		return metav1.LabelSelectorAsSelector(&p.Spec.NodeSelector)
	}
	c.mu.Lock()
	e, ok := c.byUID[p.UID]
	c.mu.Unlock()
	if ok && e.generation == p.Generation {
		return e.sel, e.err
	}
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.NodeSelector)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byUID == nil || len(c.byUID) >= maxCachedSelectors {
		c.byUID = map[types.UID]parsedSelector{} // deleted policies' entries go with the rest
	}
	c.byUID[p.UID] = parsedSelector{generation: p.Generation, sel: sel, err: err}
	return sel, err
}

// inForce is the node selector that decides which nodes p covers: the spec's, or while the
// spec's does not parse, the one last in force (status.nodeSelector), so that a broken edit
// moves no node to another policy or to none. The error is the spec's, when neither parses
// (a policy whose selector never parsed covers no node).
func (c *selectorCache) inForce(p *v1alpha1.FencingPolicy) (labels.Selector, error) {
	sel, err := c.of(p)
	if err == nil {
		return sel, nil
	}
	if last, ok := p.LastNodeSelector(); ok {
		return last, nil
	}
	return nil, err
}

func leaseTimeout(p *v1alpha1.FencingPolicy) time.Duration {
	if d := p.Spec.Detection.LeaseTimeout; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return DefaultLeaseTimeout
}

// DefaultHeartbeatInterval applies when a policy sets none: the agent's own default.
const DefaultHeartbeatInterval = time.Second

// HeartbeatIntervals returns the heartbeat interval each node's agent is to use: its policy's
// detection.heartbeatInterval, the default for a node under a policy without one, and 0 (the
// agent keeps its own) for a node no policy covers or that cannot be read. It is asked for
// every heartbeat, so each node's answer is remembered until the cache's events say it may
// have changed: any policy added, deleted or given a new spec forgets every answer, a node
// added, relabelled or deleted forgets its own. A change reaches the agent at its next
// heartbeat. IntervalMemoTTL bounds what a lost event could cost. The detectors judge each
// agent by the longer of this interval and the one it reports using (classify.JudgedInterval):
// an agent asked for a longer one is silent that long before it reports it.
func HeartbeatIntervals(ctx context.Context, c client.Reader, informers cache.Informers) (func(node string) time.Duration, error) {
	m := newIntervalMemo(func(name string) time.Duration { return heartbeatInterval(c, name) }, time.Now, IntervalMemoTTL)
	pi, err := informers.GetInformer(ctx, &v1alpha1.FencingPolicy{})
	if err != nil {
		return nil, fmt.Errorf("watching fencing policies for the agents' intervals: %w", err)
	}
	if _, err := pi.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { m.forgetAll() },
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*v1alpha1.FencingPolicy)
			n, ok2 := cur.(*v1alpha1.FencingPolicy)
			if !ok1 || !ok2 || o.Generation != n.Generation {
				m.forgetAll()
			}
		},
		DeleteFunc: func(any) { m.forgetAll() },
	}); err != nil {
		return nil, fmt.Errorf("watching fencing policies for the agents' intervals: %w", err)
	}
	ni, err := informers.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return nil, fmt.Errorf("watching nodes for the agents' intervals: %w", err)
	}
	if _, err := ni.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		// An agent may heartbeat before the cache holds its node: the answer then remembered
		// (no policy) is forgotten when the node arrives.
		AddFunc: func(obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				m.forget(n.Name)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := cur.(*corev1.Node)
			if !ok1 || !ok2 {
				m.forgetAll()
			} else if !maps.Equal(o.Labels, n.Labels) {
				m.forget(n.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				m.forget(n.Name)
			} else {
				m.forgetAll() // a tombstone: the node's last state was missed
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watching nodes for the agents' intervals: %w", err)
	}
	return m.get, nil
}

// IntervalMemoTTL is the longest HeartbeatIntervals remembers a node's answer without an event.
const IntervalMemoTTL = 5 * time.Minute

// heartbeatInterval reads node's interval from c (a cache: the cache's own objects, not copies).
func heartbeatInterval(c client.Reader, name string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, node, &client.GetOptions{UnsafeDisableDeepCopy: ptr.To(true)}); err != nil {
		return 0
	}
	p, err := policyFor(ctx, c, node, client.UnsafeDisableDeepCopy)
	if err != nil || p == nil {
		return 0
	}
	if d := p.Spec.Detection.HeartbeatInterval; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return DefaultHeartbeatInterval
}

// intervalMemo remembers read's answer for each node until it is forgotten or ttl has passed.
// The lock is not held while reading, so concurrent heartbeats never wait on each other's
// reads; an answer read while something was forgotten is not kept (it may predate the
// change). Expired answers are swept once per ttl, so nodes that left the cluster unseen are
// forgotten too.
type intervalMemo struct {
	read func(node string) time.Duration
	now  func() time.Time
	ttl  time.Duration

	mu     sync.Mutex
	byNode map[string]memoized
	swept  time.Time
	// epoch counts forgets: an answer read across one is not remembered.
	epoch uint64
}

type memoized struct {
	d       time.Duration
	expires time.Time
}

func newIntervalMemo(read func(string) time.Duration, now func() time.Time, ttl time.Duration) *intervalMemo {
	return &intervalMemo{read: read, now: now, ttl: ttl, byNode: map[string]memoized{}, swept: now()}
}

func (m *intervalMemo) get(node string) time.Duration {
	now := m.now()
	m.mu.Lock()
	e, ok := m.byNode[node]
	epoch := m.epoch
	m.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.d
	}
	d := m.read(node)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.epoch == epoch {
		m.byNode[node] = memoized{d: d, expires: now.Add(m.ttl)}
	}
	if now.Sub(m.swept) >= m.ttl {
		for n, e := range m.byNode {
			if !now.Before(e.expires) {
				delete(m.byNode, n)
			}
		}
		m.swept = now
	}
	return d
}

// forget drops node's answer.
func (m *intervalMemo) forget(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byNode, node)
	m.epoch++
}

// forgetAll drops every answer.
func (m *intervalMemo) forgetAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.byNode)
	m.epoch++
}

// health counts the policy's nodes and those that look failed or late (Suspect).
type health struct {
	Nodes, Unhealthy, MaxUnhealthy int
	// Listed are the first unhealthy nodes by name, at most v1alpha1.MaxUnhealthyListed.
	Listed []v1alpha1.NodeVerdict
	// Failed names the unhealthy nodes that look failed, not only late, in the order observed
	// (PolicyReconciler.Wake, nextPass).
	Failed []string
	// Raised counts the nodes whose Lease was judged with a longer timeout than the policy's
	// leaseTimeout, their kubelet renewing less often than every half of it (lease.Timeout);
	// RaisedTo is the longest such timeout.
	Raised   int
	RaisedTo time.Duration
	// Taken counts, by policy, the nodes the policy's selector matches that a policy before it
	// by name covers (policyFor): they are not this policy's.
	Taken map[string]int
}

// Blocked says whether the storm guard forbids automatic fencing.
func (h health) Blocked() bool { return h.Unhealthy > h.MaxUnhealthy }

// policyHealth observes every node the policy covers, in one pass: those its selector matches
// and no policy before it by name (policyFor) covers. A node another policy covers is that
// policy's to count; counted here too, it would raise this policy's limit with nodes it never
// fences.
func policyHealth(ctx context.Context, o observe.Observer, p *v1alpha1.FencingPolicy, now time.Time) (health, error) {
	sel, err := selectors.inForce(p)
	if err != nil {
		return health{}, fmt.Errorf("parsing the node selector of policy %s: %w", p.Name, err)
	}
	var nodes corev1.NodeList
	// Read-only: the cache's own objects, not a copy of every node each pass.
	if err := o.Reader.List(ctx, &nodes, client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
		return health{}, fmt.Errorf("listing nodes: %w", err)
	}
	before, err := policiesBefore(ctx, o.Reader, p.Name)
	if err != nil {
		return health{}, err
	}
	var taken map[string]int
	if len(before) > 0 {
		nodes.Items = slices.DeleteFunc(nodes.Items, func(n corev1.Node) bool { // the slice is this List's own
			i := slices.IndexFunc(before, func(s namedSelector) bool { return s.sel.Matches(labels.Set(n.Labels)) })
			if i < 0 {
				return false
			}
			if taken == nil {
				taken = map[string]int{}
			}
			taken[before[i].policy]++
			return true
		})
	}
	all, err := o.ObserveAll(ctx, nodes.Items, leaseTimeout(p), now)
	if err != nil {
		return health{}, err
	}
	h := countUnhealthy(all, p)
	h.Taken = taken
	return h, nil
}

// countUnhealthy is the storm guard's arithmetic over one pass of observations.
func countUnhealthy(all []detectors.Observation, p *v1alpha1.FencingPolicy) health {
	h := health{Nodes: len(all)}
	timeout := leaseTimeout(p)
	for _, obs := range all {
		if obs.Timeout > timeout {
			h.Raised, h.RaisedTo = h.Raised+1, max(h.RaisedTo, obs.Timeout)
		}
		if obs.Verdict.Failed() {
			h.Failed = append(h.Failed, obs.Node)
		}
		// Late nodes count too: nodes cut off together expire a moment apart, and the guard
		// must see the storm before the first of them is fenced.
		if unhealthy(obs.Verdict) {
			h.Unhealthy++
			h.Listed = append(h.Listed, v1alpha1.NodeVerdict{Node: obs.Node, Verdict: string(obs.Verdict), Reason: truncate(obs.Reason, 1024)})
		}
	}
	h.MaxUnhealthy = maxUnhealthy(p, h.Nodes)
	sort.Slice(h.Listed, func(i, j int) bool { return h.Listed[i].Node < h.Listed[j].Node })
	if len(h.Listed) > v1alpha1.MaxUnhealthyListed {
		h.Listed = h.Listed[:v1alpha1.MaxUnhealthyListed]
	}
	return h
}

// unhealthy says whether the storm guard counts a node of verdict v: failed, or late (Suspect).
func unhealthy(v detectors.Verdict) bool { return v.Failed() || v == detectors.Suspect }

// truncate cuts s to at most n bytes, on a UTF-8 boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// stormGuard is the policy's stormGuard.maxUnhealthy, the default (40%) when it sets none, and
// 0 with an error when the CRD's rule refuses it (a policy stored before the rule): no failed
// node is fenced automatically until it is fixed, as for a pod selector that does not parse.
// A value that does not say how many nodes may fail must not switch the guard off (above
// 100%, a count past the rule's), and the policy's InvalidSpec condition says why it holds.
func stormGuard(p *v1alpha1.FencingPolicy) (intstr.IntOrString, error) {
	v := p.Spec.StormGuard.MaxUnhealthy
	switch {
	case v == nil:
		return defaultMaxUnhealthy, nil
	case v.Type == intstr.Int && v.IntVal >= 0 && v.IntVal <= maxUnhealthyCount:
		return *v, nil
	case v.Type == intstr.String && percentRule.MatchString(v.StrVal):
		return *v, nil
	}
	return intstr.FromInt32(0), fmt.Errorf("spec.stormGuard.maxUnhealthy %q is neither a count (0 to %d) nor a percentage from 0%% to 100%%: no failed node of the policy is fenced automatically until it is fixed (fence requests and node deletions still are)",
		v.String(), maxUnhealthyCount)
}

// maxUnhealthyCount and percentRule are the CRD's rule for stormGuard.maxUnhealthy.
const maxUnhealthyCount = 1000000

var percentRule = regexp.MustCompile(`^(100|[1-9]?[0-9])%$`)

// maxUnhealthy resolves the storm guard: a count, or a percentage rounded down but at least 1.
func maxUnhealthy(p *v1alpha1.FencingPolicy, nodes int) int {
	v, _ := stormGuard(p) // an invalid one is said by the policy's InvalidSpec condition
	if v.Type == intstr.Int {
		return v.IntValue()
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, nodes, false)
	if err != nil {
		return 0
	}
	if n < 1 && nodes > 0 && v.StrVal != "0%" {
		n = 1
	}
	return n
}
