package simnode

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"palisade.dev/palisade/test/testbed/csidriver"
)

// PowerSource is the node's power supply; an ipmi_sim BMC implements it. A nil PowerSource
// is always on. PoweredOn is polled every Options.PowerPollInterval; on error the node keeps
// its current state.
type PowerSource interface {
	PoweredOn() (bool, error)
}

// Options configures a simulated node.
type Options struct {
	Name        string            // required
	Labels      map[string]string // added to kubernetes.io/hostname, os and arch
	Annotations map[string]string
	// ProviderID is the Node's spec.providerID, as a cloud's kubelet sets it ("aws:///<zone>/<id>").
	ProviderID string
	// SystemUUID is the Node's status.nodeInfo.systemUUID, the SMBIOS UUID a kubelet reads from
	// its machine; default "simnode-<n>", which no BMC identity check compares.
	SystemUUID string
	// CPU, Memory and Pods are the node's capacity and allocatable; default "4", "16Gi", "110".
	CPU, Memory, Pods string
	// LeaseRenewInterval is how often the Lease is renewed and the Node's status checked;
	// default 10s (the kubelet's: a quarter of the lease duration, 40s).
	LeaseRenewInterval time.Duration
	Power              PowerSource
	// PowerPollInterval is how often Power is polled; default 200ms.
	PowerPollInterval time.Duration
	// CSIDrivers are the CSI drivers whose node plugins "run" on the node: listed in its CSINode
	// with the node's name as node ID, as the kubelet registers them. Nil means the test bed's
	// driver (csidriver.Name); an empty slice, none.
	CSIDrivers []string
	// ExternalLease leaves the node's Lease and its Ready heartbeat to another process (the
	// test bed's kubelet stand-in, simkubelet, running in the node's network namespace): the
	// node neither creates nor renews the Lease, and writes the Node's status only when it
	// registers it and on every boot (a new boot ID), never to refresh the Ready heartbeat or
	// to set Ready back to True after the node lifecycle controller marked it Unknown. Pods,
	// volumes, the CSINode and the power source work as without it; the caller stops the
	// external process when the power goes off.
	ExternalLease bool
	// InternalIP is the Node's InternalIP address, also its pods' host IP (e.g. the node's
	// address in a network namespace, netns.Node.IP); default a unique 10.0.x.y.
	InternalIP string
	// Logf, when set, receives what the node does; never called after Stop returns.
	Logf func(format string, args ...any)
}

const (
	// statusReportInterval bounds the age of the Ready condition's heartbeat.
	statusReportInterval = time.Minute
	kubeletVersion       = "v1.37.0"
)

// nodeSeq numbers the nodes of this process, for distinct IP addresses.
var nodeSeq atomic.Int64

// Node is a simulated node. Its methods are safe for concurrent use.
type Node struct {
	kube     kubernetes.Interface
	opts     Options
	capacity corev1.ResourceList
	ip       string
	seq      int64

	mu        sync.Mutex
	bootID    string
	bootTime  time.Time
	poweredOn bool
	paused    bool
	podSeq    int
	waiting   map[string]string // pod key → what it waits for before it can run

	hbMu      sync.Mutex // serialises heartbeats
	nodeUID   types.UID
	lease     *coordinationv1.Lease
	csiNodeOf types.UID // the Node whose CSINode lists the drivers

	kick    chan struct{}
	queue   workqueue.TypedRateLimitingInterface[string]
	factory informers.SharedInformerFactory
	pods    cache.SharedIndexInformer
	// vaFactory and attachments watch the VolumeAttachments (of every node).
	vaFactory   informers.SharedInformerFactory
	attachments cache.SharedIndexInformer
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	stopOnce    sync.Once
}

// Start registers the node (when its power is on) and runs it until Stop or until ctx ends.
// It returns once the Node and its Lease (unless Options.ExternalLease) exist and the node
// watches its pods.
func Start(ctx context.Context, kube kubernetes.Interface, opts Options) (*Node, error) {
	n, err := newNode(kube, opts)
	if err != nil {
		return nil, err
	}
	on, err := n.readPower()
	if err != nil {
		return nil, fmt.Errorf("starting node %s: reading power: %w", opts.Name, err)
	}
	ctx, n.cancel = context.WithCancel(ctx)
	if err := n.startPodInformer(ctx); err != nil {
		n.Stop()
		return nil, err
	}
	if err := n.startAttachmentInformer(ctx); err != nil {
		n.Stop()
		return nil, err
	}
	if on {
		if err := n.boot(ctx); err != nil {
			n.Stop()
			return nil, fmt.Errorf("starting node %s: %w", opts.Name, err)
		}
	}
	n.goLoop(func() { n.heartbeatLoop(ctx) })
	n.goLoop(func() { n.podWorker(ctx) })
	if n.opts.Power != nil {
		n.goLoop(func() { n.powerLoop(ctx) })
	}
	return n, nil
}

func newNode(kube kubernetes.Interface, opts Options) (*Node, error) {
	if opts.Name == "" {
		return nil, errors.New("starting node: no name")
	}
	opts = opts.withDefaults()
	capacity := corev1.ResourceList{}
	for name, q := range map[corev1.ResourceName]string{
		corev1.ResourceCPU: opts.CPU, corev1.ResourceMemory: opts.Memory, corev1.ResourcePods: opts.Pods,
		corev1.ResourceEphemeralStorage: "100Gi",
	} {
		qty, err := resource.ParseQuantity(q)
		if err != nil {
			return nil, fmt.Errorf("starting node %s: parsing %s %q: %w", opts.Name, name, q, err)
		}
		capacity[name] = qty
	}
	seq := nodeSeq.Add(1)
	ip := fmt.Sprintf("10.0.%d.%d", (seq/254)%256, seq%254+1)
	if opts.InternalIP != "" {
		addr, err := netip.ParseAddr(opts.InternalIP)
		if err != nil {
			return nil, fmt.Errorf("starting node %s: Options.InternalIP must be an IP address: %w", opts.Name, err)
		}
		ip = addr.String()
	}
	return &Node{
		kube:     kube,
		opts:     opts,
		capacity: capacity,
		seq:      seq,
		ip:       ip,
		kick:     make(chan struct{}, 1),
		waiting:  map[string]string{},
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
	}, nil
}

func (o Options) withDefaults() Options {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.CPU, "4")
	def(&o.Memory, "16Gi")
	def(&o.Pods, "110")
	if o.LeaseRenewInterval <= 0 {
		o.LeaseRenewInterval = 10 * time.Second
	}
	if o.PowerPollInterval <= 0 {
		o.PowerPollInterval = 200 * time.Millisecond
	}
	if o.CSIDrivers == nil {
		o.CSIDrivers = []string{csidriver.Name}
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

func (n *Node) goLoop(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// Name is the name of the Node object.
func (n *Node) Name() string { return n.opts.Name }

// BootID is the boot ID of the current boot (reported in the Node's nodeInfo); it changes on
// every power cycle.
func (n *Node) BootID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.bootID
}

// PauseHeartbeats simulates a network partition: from now on no request of the node reaches
// the API server (no Lease renewal, no Node status, no pod status, no confirmation of pod
// deletions), while its workload keeps running.
func (n *Node) PauseHeartbeats() {
	n.mu.Lock()
	n.paused = true
	n.mu.Unlock()
	n.logf("heartbeats paused")
}

// ResumeHeartbeats ends the partition: the Lease is renewed at once and the pods are synced.
func (n *Node) ResumeHeartbeats() {
	n.mu.Lock()
	was := n.paused
	n.paused = false
	n.mu.Unlock()
	if was {
		n.logf("heartbeats resumed")
		n.wake()
	}
}

// Stop ends the node's goroutines: it vanishes like a machine losing power, leaving its Node,
// Lease and pods as they are. It is idempotent.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		if n.cancel != nil {
			n.cancel()
		}
		n.queue.ShutDown()
		for _, f := range []informers.SharedInformerFactory{n.factory, n.vaFactory} {
			if f != nil {
				f.Shutdown()
			}
		}
		n.wg.Wait()
	})
}

// active reports whether the node is powered on and reaches the API server. The power is read
// afresh, not only taken from the last poll: a machine whose power is cut does nothing from that
// instant (a pod's termination confirmed after its BMC reads Off would be a lie of the test bed).
// On a read error the node keeps its last state, as powerLoop does.
func (n *Node) active() bool {
	n.mu.Lock()
	up := n.poweredOn && !n.paused
	n.mu.Unlock()
	if !up {
		return false
	}
	on, err := n.readPower()
	return err != nil || on
}

// wake makes the node heartbeat at once and resync all its pods.
func (n *Node) wake() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
	n.requeueAllPods()
}

func (n *Node) logf(format string, args ...any) {
	n.opts.Logf("simnode %s: "+format, append([]any{n.opts.Name}, args...)...)
}

func (n *Node) readPower() (bool, error) {
	if n.opts.Power == nil {
		return true, nil
	}
	return n.opts.Power.PoweredOn()
}

// powerLoop polls the power source and turns the node off or boots it on every change.
func (n *Node) powerLoop(ctx context.Context) {
	tick := time.NewTicker(n.opts.PowerPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		on, err := n.readPower()
		if err != nil {
			n.logf("reading power: %v", err)
			continue
		}
		n.mu.Lock()
		was := n.poweredOn
		if !on {
			n.poweredOn = false
		}
		n.mu.Unlock()
		switch {
		case was && !on:
			n.logf("power lost: node halted")
		case !was && on:
			if err := n.boot(ctx); err != nil && ctx.Err() == nil {
				n.logf("booting: %v (retrying)", err)
			}
		}
	}
}

// boot starts a new boot: a new boot ID, then (unless partitioned) the Node's status and
// Lease at once, then the pods.
func (n *Node) boot(ctx context.Context) error {
	n.mu.Lock()
	n.bootID = string(uuid.NewUUID())
	n.bootTime = time.Now()
	paused, bootID := n.paused, n.bootID
	n.mu.Unlock()
	if !paused {
		if err := n.heartbeat(ctx); err != nil {
			return fmt.Errorf("booting: %w", err)
		}
	}
	n.mu.Lock()
	n.poweredOn = true
	n.mu.Unlock()
	n.logf("booted (bootID %s)", bootID)
	n.requeueAllPods()
	return nil
}

// heartbeatLoop renews the Lease and refreshes the Node's status while the node is active.
// Like the kubelet, it bounds each attempt (the kubelet's heartbeat client times out) and
// retries a failed one at once with a short backoff (200ms doubling up to 7s, the kubelet's
// lease controller) rather than at its next interval.
func (n *Node) heartbeatLoop(ctx context.Context) {
	const firstRetry, maxRetry = 200 * time.Millisecond, 7 * time.Second
	tick := time.NewTicker(n.opts.LeaseRenewInterval)
	defer tick.Stop()
	var retry <-chan time.Time
	backoff := firstRetry
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-n.kick:
		case <-retry:
		}
		retry = nil
		if !n.active() {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, n.opts.LeaseRenewInterval)
		err := n.heartbeat(hctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			backoff = firstRetry
			continue
		}
		n.logf("heartbeat: %v (again in %s)", err, backoff)
		retry = time.After(backoff)
		backoff = min(2*backoff, maxRetry)
	}
}

// heartbeat makes sure the Node exists with a fresh Ready status for this boot and its
// CSINode lists its CSI drivers, then renews the Lease (with Options.ExternalLease: the Node
// exists with this boot's status, and the Lease is not touched).
func (n *Node) heartbeat(ctx context.Context) error {
	n.hbMu.Lock()
	defer n.hbMu.Unlock()
	if err := n.syncNode(ctx); err != nil {
		return err
	}
	if err := n.syncCSINode(ctx); err != nil {
		return err
	}
	if n.opts.ExternalLease {
		return nil
	}
	return n.renewLease(ctx)
}
