package scale

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/channel"
)

const (
	podsPerNode   = 30
	leaseInterval = 10 * time.Second
	hbInterval    = time.Second
	parallel      = 64
)

func nodeName(i int) string { return fmt.Sprintf("scale-%05d", i) }

// bootID is simulated node i's boot ID, as its Node and its agent say it.
func bootID(i int) string { return fmt.Sprintf("boot-%05d", i) }

// forEach runs f(i) for i in [0,n) on parallel workers and returns the first error.
func forEach(n int, f func(i int) error) error { return forEachOf(n, parallel, f) }

// forEachOf runs f(i) for i in [0,n) on workers workers and returns the first error.
func forEachOf(n, workers int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// createNodes creates n Ready nodes as kubelets post them (kubeletNode), their Leases and
// podsPerNode Running pods on each.
func createNodes(ctx context.Context, kube kubernetes.Interface, n int) error {
	if err := forEach(n, func(i int) error {
		node := kubeletNode(i)
		status := node.Status
		got, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating node %s: %w", node.Name, err)
		}
		got.Status = status
		if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("marking node %s Ready: %w", node.Name, err)
		}
		_, err = renewLease(ctx, kube, node.Name, true, nil)
		return err
	}); err != nil {
		return err
	}
	return forEach(n*podsPerNode, func(i int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%s-%02d", nodeName(i/podsPerNode), i%podsPerNode), Namespace: "default"},
			Spec:       corev1.PodSpec{NodeName: nodeName(i / podsPerNode), Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
		}
		got, err := kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating pod %s: %w", pod.Name, err)
		}
		got.Status.Phase = corev1.PodRunning
		got.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if _, err := kube.CoreV1().Pods("default").UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("marking pod %s Running: %w", pod.Name, err)
		}
		return nil
	})
}

// nodeImages is how many images a simulated node reports: the kubelet's nodeStatusMaxImages (50),
// which a node that has pulled that many or more reports.
const nodeImages = 50

// kubeletNode is simulated node i as a kubelet registers it and posts its status: the labels and
// annotations a kubelet, a cloud provider and a CSI driver set, its pod CIDR and provider ID, the
// four conditions, addresses, capacity and allocatable, daemon endpoints, system info, and
// nodeImages images, each with a digest and a tag (on a real node those are most of its size: a
// few kB a node, which the controller's cache would hold were it not trimmed). The values are
// made up; their shape and size are a kubelet's.
func kubeletNode(i int) *corev1.Node {
	name := nodeName(i)
	ip := fmt.Sprintf("10.%d.%d.%d", 16+i/65536, i/256%256, i%256)
	id := fmt.Sprintf("i-0%016x", 0xabc000000+i)
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, status corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: status, LastHeartbeatTime: now, LastTransitionTime: now, Reason: reason, Message: msg}
	}
	qty := func(s string) resource.Quantity { return resource.MustParse(s) }
	resources := corev1.ResourceList{corev1.ResourceCPU: qty("16"), corev1.ResourceMemory: qty("65843012Ki"), corev1.ResourcePods: qty("110"),
		corev1.ResourceEphemeralStorage: qty("203056560Ki"), "hugepages-1Gi": qty("0"), "hugepages-2Mi": qty("0")}
	images := make([]corev1.ContainerImage, nodeImages)
	for k := range images {
		repo := fmt.Sprintf("registry.example.com/team-%02d/service-%02d", k%7, k)
		images[k] = corev1.ContainerImage{Names: []string{fmt.Sprintf("%s@sha256:%064x", repo, 0x5eed0000+k), fmt.Sprintf("%s:v1.%d.%d", repo, k, i%10)},
			SizeBytes: int64(20+3*k) << 20}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"palisade.dev/scale": "true", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m6i.4xlarge",
				"topology.kubernetes.io/region": "eu-west-1", "topology.kubernetes.io/zone": fmt.Sprintf("eu-west-1%c", 'a'+i%3)},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"csi.volume.kubernetes.io/nodeid": fmt.Sprintf(`{"ebs.csi.aws.com":%q}`, id)}},
		Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 128+i/256, i%256), PodCIDRs: []string{fmt.Sprintf("10.%d.%d.0/24", 128+i/256, i%256)},
			ProviderID: "aws:///eu-west-1a/" + id},
		Status: corev1.NodeStatus{
			Capacity: resources, Allocatable: resources.DeepCopy(),
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{MachineID: fmt.Sprintf("%032x", 0xfeed0000+i), SystemUUID: fmt.Sprintf("ec2%05x-0000-4000-8000-%012x", i, i),
				BootID: bootID(i), KernelVersion: "6.12.48+deb13-amd64", OSImage: "Debian GNU/Linux 13 (trixie)",
				ContainerRuntimeVersion: "containerd://2.1.4", KubeletVersion: "v1.37.0", OperatingSystem: "linux", Architecture: "amd64"},
			Images: images,
		},
	}
}

// renewLease creates or renews node's Lease in kube-node-lease. A renewal updates last, the
// copy this node last wrote, as the kubelet's lease controller does
// (k8s.io/component-helpers/apimachinery/lease: one PUT a renewal, no GET), and reads the Lease
// again only when that update fails or there is no copy yet. It returns the copy written.
func renewLease(ctx context.Context, kube kubernetes.Interface, node string, create bool, last *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	leases := kube.CoordinationV1().Leases("kube-node-lease")
	now := metav1.NewMicroTime(time.Now())
	secs := int32(40)
	if create {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &secs, RenewTime: &now}}
		out, err := leases.Create(ctx, l, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("creating lease %s: %w", node, err)
		}
		return out, nil
	}
	if last != nil {
		l := last.DeepCopy()
		l.Spec.RenewTime = &now
		if out, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
			return out, nil
		}
	}
	l, err := leases.Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading lease %s: %w", node, err)
	}
	l.Spec.RenewTime = &now
	out, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("renewing lease %s: %w", node, err)
	}
	return out, nil
}

// stopped is the set of nodes whose kubelet and agent are silent (the rack that lost power).
type stopped struct {
	mu  sync.Mutex
	set map[int]bool
}

func (s *stopped) has(i int) bool { s.mu.Lock(); defer s.mu.Unlock(); return s.set[i] }

func (s *stopped) add(is ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range is {
		s.set[i] = true
	}
}

// runLeases runs every node's lease controller (renewEvery), their first renewals spread
// evenly over leaseInterval; gaps records the time between a node's renewals.
func runLeases(ctx context.Context, kube kubernetes.Interface, n int, off *stopped, gaps *latencies) {
	step := leaseInterval / time.Duration(n)
	for i := 0; i < n; i++ {
		go renewEvery(ctx, kube, i, time.Duration(i)*step, off, gaps)
	}
}

// renewEvery is node i's kubelet lease controller: first after first, it renews the node's Lease
// from the copy it last wrote (renewLease) and then waits leaseInterval with up to 4 % jitter from
// when the renewal returned, as the kubelet does (k8s.io/component-helpers/apimachinery/lease:
// wait.JitterUntilWithContext(ctx, sync, renewInterval, 0.04, true), sliding). A slow API server
// slows a node's renewals by its PUT's time, as it does a kubelet's; no renewal is dropped, and
// none piles up. (One ticker for every node dropped ticks while its loop was late: gaps grew to
// 11-12 s on a busy machine. A schedule that caught up at once piled thousands of renewals on
// the API server after a slow spell, until the bench ran out of file descriptors.)
func renewEvery(ctx context.Context, kube kubernetes.Interface, i int, first time.Duration, off *stopped, gaps *latencies) {
	t := time.NewTimer(first)
	defer t.Stop()
	var last *coordinationv1.Lease
	for renewal := i; ; renewal++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !off.has(i) {
			prev := last
			if l, err := renewLease(ctx, kube, nodeName(i), false, prev); err == nil {
				last = l
				if prev != nil && prev.Spec.RenewTime != nil && l.Spec.RenewTime != nil {
					gaps.add(l.Spec.RenewTime.Sub(prev.Spec.RenewTime.Time), nil)
				}
			}
			if renewal%statusEvery == 0 {
				// Beside the renewals, as the kubelet's status loop runs beside its Lease's: a slow
				// post does not delay the next renewal. A failed one is the next post's to make.
				go func() { _ = postStatus(ctx, kube, i) }()
			}
		}
		t.Reset(wait.Jitter(leaseInterval, 0.04))
	}
}

// statusEvery is how many Lease renewals a simulated kubelet makes between two posts of its node's
// status when nothing in it changes: the kubelet's nodeStatusReportFrequency (5 min) over its
// Lease's renewal interval. Each node posts at its own phase, as kubelets started at different
// times do: 5000 nodes post about 17 a second, each a watch event of the whole Node for the
// controller.
const statusEvery = int(5 * time.Minute / leaseInterval)

// postStatus is simulated node i's kubelet posting its unchanged status: the conditions' heartbeat
// times, in a strategic merge patch of the status as the kubelet sends one.
func postStatus(ctx context.Context, kube kubernetes.Interface, i int) error {
	now := metav1.Now().UTC().Format(time.RFC3339)
	var conds []string
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeReady} {
		conds = append(conds, fmt.Sprintf(`{"type":%q,"lastHeartbeatTime":%q}`, t, now))
	}
	patch := fmt.Sprintf(`{"status":{"conditions":[%s]}}`, strings.Join(conds, ","))
	_, err := kube.CoreV1().Nodes().Patch(ctx, nodeName(i), types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	return err
}

// gapSummary says how the gaps between the simulated nodes' renewals spread (d sorted): how
// evenly the simulated kubelets renew on the busy machine, which decides how often the
// controller looks at a node again (fencing's lookAgain).
func gapSummary(d []time.Duration) string {
	if len(d) == 0 {
		return "no renewal"
	}
	at := func(q float64) time.Duration { return d[int(q*float64(len(d)-1))].Round(time.Millisecond) }
	over := sort.Search(len(d), func(i int) bool { return d[i] > leaseInterval+leaseInterval/10 })
	return fmt.Sprintf("%d renewals, the gap since the node's previous: min %s, p50 %s, p90 %s, p99 %s, max %s; %d (%.1f %%) over %s",
		len(d), at(0), at(0.5), at(0.9), at(0.99), at(1), len(d)-over, 100*float64(len(d)-over)/float64(len(d)), leaseInterval+leaseInterval/10)
}

// latencies collects durations: the heartbeats' round trips, the gaps between renewals.
type latencies struct {
	mu     sync.Mutex
	d      []time.Duration
	errors int
}

func (l *latencies) add(d time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errors++
		return
	}
	l.d = append(l.d, d)
}

// drain returns the durations since the last drain or reset, sorted, and the error count.
func (l *latencies) drain() ([]time.Duration, int) {
	l.mu.Lock()
	d, errs := l.d, l.errors
	l.d, l.errors = nil, 0
	l.mu.Unlock()
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d, errs
}

// reset returns the p99, count and error count since the last reset or drain.
func (l *latencies) reset() (time.Duration, int, int) {
	d, errs := l.drain()
	if len(d) == 0 {
		return 0, 0, errs
	}
	return d[len(d)*99/100], len(d), errs
}

// runAgent heartbeats for node i at hbInterval through the real agent client (one keep-alive
// connection), starting at an offset that spreads the agents over the interval.
func runAgent(ctx context.Context, c *channel.Client, i, n int, off *stopped, lat *latencies) {
	defer c.Close()
	select {
	case <-ctx.Done():
		return
	case <-time.After(hbInterval * time.Duration(i) / time.Duration(n)):
	}
	t := time.NewTicker(hbInterval)
	defer t.Stop()
	boot := bootID(i)
	var exec *agentwire.ExecutorStatus
	for seq := uint64(1); ; seq++ {
		if !off.has(i) {
			began := time.Now()
			rep := agentwire.Report{Node: nodeName(i), BootID: boot, Seq: seq, KubeletHealthy: exec == nil,
				IntervalMillis: hbInterval.Milliseconds(), SentAt: began, Executor: exec}
			if exec != nil {
				zero := 0
				rep.RunningContainers = &zero
			}
			cmd, err := c.Send(ctx, rep)
			if ctx.Err() != nil {
				return
			}
			lat.add(time.Since(began), err)
			exec = answer(cmd, exec)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// answer is the simulated agent's executor: a Terminate command is confirmed at once (the
// node runs no real container), with every pod of the node counted and the kubelet stopped
// first, as by the chart's agent.kubeletStopCommand (the heartbeats report the kubelet
// unhealthy from then on).
func answer(cmd *agentwire.Command, prev *agentwire.ExecutorStatus) *agentwire.ExecutorStatus {
	if cmd == nil || (prev != nil && prev.ID == cmd.ID) {
		return prev
	}
	now := time.Now()
	return &agentwire.ExecutorStatus{ID: cmd.ID, State: agentwire.ExecutorConfirmed, Pods: podsPerNode, Containers: podsPerNode,
		KubeletStopped: true, StartedAt: now, FinishedAt: now}
}
