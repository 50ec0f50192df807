package scenario

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/fencing"
	"palisade.dev/palisade/test/testbed"
)

// Milestone is one observable point of a failover.
type Milestone string

const (
	PowerLost            Milestone = "power lost"
	NodeNotReady         Milestone = "node NotReady (kube-controller-manager)"
	Detected             Milestone = "failure detected (NodeFence created)"
	PowerOffSent         Milestone = "power-off sent to the BMC"
	OffConfirmed         Milestone = "power Off confirmed by read-back"
	Verified             Milestone = "no sign of life from the node after the confirmation (VerifyFenced)"
	Tainted              Milestone = "out-of-service taint on the node"
	PodDeleted           Milestone = "stuck pod deleted"
	AttachmentReleased   Milestone = "RWO attachment released"
	ReplacementScheduled Milestone = "replacement pod scheduled on another node"
	ReplacementRunning   Milestone = "replacement pod Running"
	ReplacementWrites    Milestone = "replacement's first write accepted by the witness store"
)

// pollInterval bounds the tracker's error on every milestone.
const pollInterval = 100 * time.Millisecond

// A Target is what a Tracker follows: one node of a test bed's cluster, running the database
// pod (Namespace/PodName), and its BMC's power reading.
type Target struct {
	Cluster   *testbed.Cluster
	Node      string
	PoweredOn func() (bool, error)
	// Wrote, when set, says whether a witness store has accepted a write of the pod with this
	// UID (real machines): the replacement's first write is then a milestone.
	Wrote func(podUID string) bool
}

// Tracker watches a failover of the database pod from the target's node, from the outside, by
// polling the API server; every time is when the tracker first saw the milestone.
type Tracker struct {
	tg     Target
	oldUID types.UID
	start  time.Time
	notify func(Milestone, time.Duration)

	mu   sync.Mutex
	at   map[Milestone]time.Duration
	seq  []Milestone
	safe *bool // at the first release seen: was the fence confirmed and the power Off?
	// unsafe says what the tracker saw at the first release.
	unsafe string
	order  *orderWatch
	stop   context.CancelFunc
	done   chan struct{}
}

// Track starts tracking node's failover from now (the moment power is cut); notify, when set,
// is called for each milestone as it is seen.
func (e *Env) Track(ctx context.Context, node *Node, old *corev1.Pod, notify func(Milestone, time.Duration)) (*Tracker, error) {
	return Track(ctx, Target{Cluster: e.Cluster, Node: node.Name(), PoweredOn: node.BMC.PoweredOn}, old, notify)
}

// Track starts tracking the target's failover of the pod old from now.
func Track(ctx context.Context, tg Target, old *corev1.Pod, notify func(Milestone, time.Duration)) (*Tracker, error) {
	ctx, cancel := context.WithCancel(ctx)
	order, err := watchOrder(ctx, tg.Cluster, tg.Node, old.UID)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watching the order of writes: %w", err)
	}
	t := &Tracker{tg: tg, oldUID: old.UID, start: time.Now(), notify: notify, order: order,
		at: map[Milestone]time.Duration{}, stop: cancel, done: make(chan struct{})}
	t.mark(PowerLost)
	go func() {
		defer close(t.done)
		_ = wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
			t.poll(ctx)
			return false, nil
		})
	}()
	return t, nil
}

// Stop ends tracking.
func (t *Tracker) Stop() { t.stop(); <-t.done; t.order.wg.Wait() }

func (t *Tracker) mark(m Milestone) {
	t.mu.Lock()
	if _, seen := t.at[m]; seen {
		t.mu.Unlock()
		return
	}
	d := time.Since(t.start)
	t.at[m] = d
	t.seq = append(t.seq, m)
	t.mu.Unlock()
	if t.notify != nil {
		t.notify(m, d)
	}
}

// poll reads the fence, the node, the pod and the attachments once. A release is recorded
// (recordSafety) before any of this poll's milestones is marked, so that whoever waits for a
// release milestone finds what was true at that release already there.
func (t *Tracker) poll(ctx context.Context) {
	c := t.tg.Cluster.Client
	var seen []Milestone
	released := false
	nf := &v1alpha1.NodeFence{}
	err := c.Get(ctx, client.ObjectKey{Name: t.tg.Node}, nf)
	if client.IgnoreNotFound(err) != nil {
		return // a failed read says nothing about the fence: look again at the next poll
	}
	fenceSeen := err == nil
	if fenceSeen {
		seen = append(seen, fenceMilestones(nf)...)
	}
	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: t.tg.Node}, node); err == nil {
		if !NodeReady(node) {
			seen = append(seen, NodeNotReady)
		}
		if hasOutOfService(node) {
			seen = append(seen, Tainted)
			released = true
		}
	}
	pod, gone := t.pollPod(ctx)
	seen = append(seen, pod...)
	released = released || gone
	if vas, err := attachments(ctx, c, t.tg.Node); err == nil && len(vas) == 0 {
		seen = append(seen, AttachmentReleased)
		released = true
	}
	if released {
		t.recordSafety(fenceSeen && fencing.Confirmed(nf))
	}
	for _, m := range seen {
		t.mark(m)
	}
}

// fenceMilestones lists the milestones the fence's record shows.
func fenceMilestones(nf *v1alpha1.NodeFence) []Milestone {
	seen := []Milestone{Detected}
	for _, s := range nf.Status.Steps {
		if s.State != v1alpha1.StepSucceeded {
			continue
		}
		switch s.Name {
		case v1alpha1.StepPowerOff:
			seen = append(seen, PowerOffSent)
		case v1alpha1.StepConfirmOff:
			seen = append(seen, OffConfirmed)
		case v1alpha1.StepVerifyFenced:
			seen = append(seen, Verified)
		}
	}
	return seen
}

// pollPod lists the pod milestones seen and says whether the old pod is gone.
func (t *Tracker) pollPod(ctx context.Context) ([]Milestone, bool) {
	pod := &corev1.Pod{}
	err := t.tg.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: PodName}, pod)
	if err != nil {
		if client.IgnoreNotFound(err) == nil {
			return []Milestone{PodDeleted}, true
		}
		return nil, false
	}
	if pod.UID == t.oldUID {
		return nil, false
	}
	seen := []Milestone{PodDeleted}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != t.tg.Node {
		seen = append(seen, ReplacementScheduled)
		if pod.Status.Phase == corev1.PodRunning {
			seen = append(seen, ReplacementRunning)
		}
		if t.tg.Wrote != nil && t.tg.Wrote(string(pod.UID)) {
			seen = append(seen, ReplacementWrites)
		}
	}
	return seen, true
}

// recordSafety keeps what was true the first time any release was seen.
func (t *Tracker) recordSafety(fenceConfirmed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.safe != nil {
		return
	}
	// ipmitool on a loaded machine may time out: an unanswered read is asked again, an answer
	// of On is not.
	on, err := t.tg.PoweredOn()
	for try := 0; err != nil && try < 3; try++ {
		time.Sleep(200 * time.Millisecond)
		on, err = t.tg.PoweredOn()
	}
	ok := fenceConfirmed && err == nil && !on
	t.unsafe = fmt.Sprintf("fence confirmed in the record %t, power read On %t (read error %v)", fenceConfirmed, on, err)
	t.safe = &ok
}

// ConfirmedBeforeRelease says whether the fence's confirmation was written (etcd revision)
// before the first release (taint, pod failed or deleted, attachment deleted), and the
// machine's power read Off when the tracker first saw a release. False when nothing was
// released; what names the first release.
func (t *Tracker) ConfirmedBeforeRelease() (ok bool, what string) {
	first, what := t.order.confirmedFirst()
	t.mu.Lock()
	defer t.mu.Unlock()
	safe := t.safe != nil && *t.safe
	if !first || !safe {
		at := t.unsafe
		if t.safe == nil {
			at = "the tracker saw no release"
		}
		what = fmt.Sprintf("%s; confirmation written first (etcd order) %t; at that release: %s", what, first, at)
	}
	return first && safe, what
}

// Released says whether any release was seen.
func (t *Tracker) Released() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.safe != nil
}

// At is when m was first seen, relative to the power loss.
func (t *Tracker) At(m Milestone) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, ok := t.at[m]
	return d, ok
}

// Wait blocks until m is seen.
func (t *Tracker) Wait(ctx context.Context, m Milestone, timeout time.Duration) (time.Duration, error) {
	var d time.Duration
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		var ok bool
		d, ok = t.At(m)
		return ok, nil
	})
	if err != nil {
		return 0, fmt.Errorf("waiting for %q: %w; seen so far: %v", m, err, t.Seen())
	}
	return d, nil
}

// Seen lists the milestones seen, in order.
func (t *Tracker) Seen() []Milestone {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Milestone(nil), t.seq...)
}

// NodeReady says whether the Node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasOutOfService(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == v1alpha1.TaintOutOfService {
			return true
		}
	}
	return false
}
