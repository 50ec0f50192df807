package realscene

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/checker"
	"palisade.dev/palisade/test/scenario"
	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/containerd"
	"palisade.dev/palisade/test/testbed/gobin"
	"palisade.dev/palisade/test/testbed/ipmisim"
	"palisade.dev/palisade/test/testbed/machine"
	"palisade.dev/palisade/test/testbed/netns"
	"palisade.dev/palisade/test/witness"
)

// StorePort is the witness store's port in the storage namespace.
const StorePort = 7070

// WitnessImage is busybox with /bin/witness-client, the test StatefulSet's image.
var WitnessImage = containerd.Image{Name: "palisade.test/witness:1", Cmd: []string{"/bin/witness-client"}}

var quietLogs sync.Once

// Options shape a scene.
type Options struct {
	// Machines, default 3.
	Machines int
	// NodeMonitorGracePeriod is kube-controller-manager's; default 20s.
	NodeMonitorGracePeriod time.Duration
	// Agents runs a real palisade-agent on every machine (a daemon of the machine: it dies
	// with the power and starts with every boot), heartbeating to the leading controller.
	Agents bool
	// KubeletLeftRunning configures the agents without a kubelet-stop command, as an operator
	// might by mistake: the Executor kills the pods of a node whose kubelet runs, and the
	// kubelet starts them again.
	KubeletLeftRunning bool
	// SelfFenceAfter, when not zero, runs the agents with --self-fence-after: an agent that
	// hears neither the controller, the API server (its /readyz through the LAN's relay, while
	// the kubelet answers healthy) nor a peer for longer fences its node itself.
	SelfFenceAfter time.Duration
	// Watchdog, with SelfFenceAfter, gives every machine a stand-in watchdog device
	// (watchdogStandIn) with this timeout, which its agent pets (--watchdog-device,
	// --watchdog-timeout): a machine whose agent stops petting it is reset.
	Watchdog time.Duration
	// Volumes gives the witness StatefulSet RWO CSI volumes: the test bed's CSI driver (its
	// controller plugin behind the real external-attacher) and a CSI node plugin on every
	// machine, registered with its kubelet.
	Volumes bool
	// InCluster makes the scene a cluster that a Helm chart installs into as pods
	// (incluster.go): kube-proxy on every machine, CoreDNS, pod traffic between machines and
	// out of the pod network, the Service kubernetes reaching the API server, and the
	// kube-controller-manager controllers of Services, DaemonSets and Jobs.
	InCluster bool
	// NoCRDs leaves Palisade's CRDs out of the test bed: the test installs them (a Helm
	// release of the chart does).
	NoCRDs bool
	// ImageArchives are image tarballs every machine imports at every boot (make images').
	ImageArchives []string
	// Kubelet tunes every machine's kubelet; the zero value keeps its defaults.
	Kubelet machine.KubeletTuning
	// FeatureGates are set on kube-apiserver and on every machine's kubelet (e.g.
	// ContainerStopSignals, alpha in 1.37, without which the API server drops a container's
	// lifecycle.stopSignal and the kubelet ignores it).
	FeatureGates map[string]bool
}

// Scene is a running scene; everything stops in t.Cleanup.
type Scene struct {
	Cluster  *testbed.Cluster
	LAN      *netns.LAN
	Machines []*machine.Machine
	BMCs     []*ipmisim.BMC
	Store    *witness.Store
	StoreURL string
	// Relay is the API server's address on the LAN.
	Relay string

	machines      int
	agents        *agents    // nil without Options.Agents
	volumes       *volumes   // nil without Options.Volumes
	inCluster     *inCluster // nil without Options.InCluster
	imageArchives []string
	kubelet       machine.KubeletTuning
	controllerNet *netns.Node // the controller replicas' namespace, from StartControllers
}

// Start builds the scene and waits until every machine's Node is Ready.
func Start(t testing.TB, o Options) *Scene {
	t.Helper()
	if o.Machines == 0 {
		o.Machines = 3
	}
	if o.NodeMonitorGracePeriod == 0 {
		o.NodeMonitorGracePeriod = 20 * time.Second
	}
	quietLogs.Do(func() { ctrllog.SetLogger(logr.Discard()) }) // envtest logs through it
	begin := time.Now()
	img := WitnessImage
	witnessClient, err := gobin.Build("test/cmd/witness-client", "CGO_ENABLED=0") // static: it runs in busybox
	if err != nil {
		t.Fatal(err)
	}
	img.Files = map[string]string{"bin/witness-client": witnessClient}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	controllers := append(append([]string{}, testbed.DefaultControllers...), machine.Controllers...)
	if o.InCluster {
		controllers = append(controllers, "endpointslice-controller", "daemonset-controller", "job-controller")
	}
	to := testbed.Options{AuditLog: true, NoCSIAttacher: !o.Volumes, NodeMonitorGracePeriod: o.NodeMonitorGracePeriod,
		Controllers: controllers, InCluster: o.InCluster, Logf: t.Logf}
	if o.NoCRDs {
		to.CRDDirs = []string{}
	}
	var gates []string
	for _, name := range slices.Sorted(maps.Keys(o.FeatureGates)) {
		gates = append(gates, fmt.Sprintf("%s=%t", name, o.FeatureGates[name]))
	}
	to.FeatureGates = strings.Join(gates, ",")
	if len(o.FeatureGates) > 0 {
		o.Kubelet.FeatureGates = o.FeatureGates
	}
	c, err := testbed.Start(ctx, to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	s := &Scene{Cluster: c, LAN: netns.New(t), machines: o.Machines, imageArchives: o.ImageArchives, kubelet: o.Kubelet}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the scene's API objects:\n%s", s.Describe())
		}
	})
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	s.Relay = s.LAN.Relay(t, u.Host)
	if o.Agents {
		s.agents = s.setupAgents(t, o.KubeletLeftRunning, o.SelfFenceAfter, o.Watchdog)
	}
	if o.Volumes {
		s.volumes = setupVolumes(t)
	}
	if o.InCluster {
		s.inCluster = s.setupInCluster(t, ctx)
	}
	storage := s.serveStore(t)
	t.Logf("scene: control plane, LAN, agents' and volumes' set-up in %s", time.Since(begin).Round(100*time.Millisecond))
	for i := 1; i <= o.Machines; i++ {
		s.addMachine(t, ctx, i, img)
		if err := storage.Route(s.Machines[i-1].PodSubnet(), s.Machines[i-1].Net().IP()); err != nil {
			t.Fatal(err)
		}
	}
	if s.inCluster != nil {
		s.connectPods(t, ctx)
	}
	for i, m := range s.Machines {
		s.WaitReady(t, m.Name(), 3*time.Minute)
		patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationBMCAddress + `":"` + s.BMCs[i].Address() + `"}}}`)
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: m.Name()}}
		if err := c.Client.Patch(ctx, n, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("scene: %d machines booted and Ready in %s", o.Machines, time.Since(begin).Round(100*time.Millisecond))
	return s
}

func (s *Scene) addMachine(t testing.TB, ctx context.Context, i int, img containerd.Image) {
	t.Helper()
	bmc, err := ipmisim.Start(ctx, ipmisim.Options{Dir: t.TempDir(), Host: s.LAN.HostIP()}) // the controllers' namespace reaches it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bmc.Stop() })
	var daemons []machine.Daemon
	var dog *watchdogStandIn
	if s.agents != nil {
		if s.agents.watchdog > 0 {
			dog = startWatchdog(t, s.agents.dir, NodeName(i), s.agents.watchdog, t.Logf)
		}
		daemons = append(daemons, s.agents.daemon(i, dog))
	}
	if s.volumes != nil {
		daemons = append(daemons, s.volumes.daemon())
	}
	mo := machine.Options{Name: NodeName(i), Index: i, LAN: s.LAN, Cluster: s.Cluster, APIServer: s.Relay,
		Power: bmc, Images: []containerd.Image{img}, ImageArchives: s.imageArchives, Labels: map[string]string{"palisade.dev/fenced-by": "ipmi"}, Daemons: daemons,
		Kubelet: s.kubelet}
	if s.inCluster != nil {
		s.inCluster.machineOptions(&mo)
	}
	m := machine.Start(t, mo)
	if dog != nil {
		dog.mu.Lock()
		dog.m = m
		dog.mu.Unlock()
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s kubelet log:\n%s", m.Name(), m.LogTail("kubelet", 30))
			if s.agents != nil {
				t.Logf("%s agent log:\n%s", m.Name(), m.LogTail(AgentDaemon, 20))
			}
		}
	})
	s.Machines, s.BMCs = append(s.Machines, m), append(s.BMCs, bmc)
}

// NodeName is machine i's node name (1-based).
func NodeName(i int) string { return "node-" + strconv.Itoa(i) }

// Machine is the machine of the node, nil when none.
func (s *Scene) Machine(node string) *machine.Machine {
	for _, m := range s.Machines {
		if m.Name() == node {
			return m
		}
	}
	return nil
}

// BMC is the node's BMC, nil when none.
func (s *Scene) BMC(node string) *ipmisim.BMC {
	for i, m := range s.Machines {
		if m.Name() == node {
			return s.BMCs[i]
		}
	}
	return nil
}

// serveStore runs the witness store in the LAN's "storage" namespace.
func (s *Scene) serveStore(t testing.TB) *netns.Node {
	t.Helper()
	storage := s.LAN.AddNode("storage")
	store, err := witness.NewStore(filepath.Join(t.TempDir(), "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(storage.IP(), strconv.Itoa(StorePort))
	ln, err := storage.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: store.Handler(), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); _ = store.Close() })
	s.Store, s.StoreURL = store, "http://"+addr
	return storage
}

// WaitReady waits for the Node's Ready condition to be True.
func (s *Scene) WaitReady(t testing.TB, name string, timeout time.Duration) {
	t.Helper()
	if err := s.waitNode(name, timeout, scenario.NodeReady); err != nil {
		t.Fatalf("waiting for node %s Ready: %v", name, err)
	}
}

// WaitReadySince waits until the Node's Ready condition is True with a heartbeat in or after
// since's second: posted by a kubelet started then, not the Ready standing from before it
// (a restarted kubelet posts NotReady first, its PLEG not yet healthy).
func (s *Scene) WaitReadySince(t testing.TB, name string, since time.Time, timeout time.Duration) {
	t.Helper()
	err := s.waitNode(name, timeout, func(n *corev1.Node) bool {
		return slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(since.Truncate(time.Second))
		})
	})
	if err != nil {
		t.Fatalf("waiting for node %s to post Ready since %s: %v", name, since.Format(time.RFC3339), err)
	}
}

// WaitNotReady waits until the Node's Ready condition is no longer True.
func (s *Scene) WaitNotReady(t testing.TB, name string, timeout time.Duration) {
	t.Helper()
	if err := s.waitNode(name, timeout, func(n *corev1.Node) bool { return !scenario.NodeReady(n) }); err != nil {
		t.Fatalf("waiting for node %s NotReady: %v", name, err)
	}
}

// waitNode waits until the Node, read every 200 ms, is as ok says.
func (s *Scene) waitNode(name string, timeout time.Duration, ok func(*corev1.Node) bool) error {
	return wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n := &corev1.Node{}
		if err := s.Cluster.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return false, nil
		}
		return ok(n), nil
	})
}

// History is the witness store's history so far.
func (s *Scene) History(t testing.TB) []witness.Record {
	t.Helper()
	h, err := s.Store.History()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Audit is the API server's audit log so far.
func (s *Scene) Audit(t testing.TB) []checker.Event {
	t.Helper()
	evs, err := checker.ReadAudit(s.Cluster.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}
	return evs
}
