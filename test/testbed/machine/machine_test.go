package machine_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/containerd"
	"palisade.dev/palisade/test/testbed/ipmisim"
	"palisade.dev/palisade/test/testbed/machine"
	"palisade.dev/palisade/test/testbed/netns"
)

var workload = containerd.Image{Name: "palisade.test/busybox:1", Cmd: []string{"/bin/sh"}}

// One machine, all real: its kubelet registers the Node and runs a pod whose process really
// runs; a graceful deletion is carried out by the kubelet (the container's TERM trap runs);
// the BMC's power-off through IPMI kills every process of the machine at once, the
// container's included; power-on boots it again with a new boot ID and the Node turns Ready.
// A daemon starts with every boot, dies alone when killed and with the machine's power.
func TestMachineRunsPodsAndDiesWithItsPower(t *testing.T) {
	c, lan := startCluster(t)
	bmc := startBMC(t)
	daemon := machine.Daemon{Name: "tick", Path: copyFile(t, "/bin/sleep", "palisade-tick"), Args: []string{"infinity"}}
	m := startMachine(t, c, lan, relayAPIServer(t, c, lan), bmc, "machine-1", 1, daemon)

	booted := time.Now()
	bootID := waitReady(t, c, m.Name(), "", 3*time.Minute)
	t.Logf("Node %s Ready %s after the machine started (boot ID %s)", m.Name(), time.Since(booted).Round(100*time.Millisecond), bootID)
	if bootID != m.BootID() {
		t.Errorf("the kubelet reports boot ID %s, the machine booted with %s", bootID, m.BootID())
	}
	checkDaemon(t, m, daemon.Name)

	// A graceful deletion: the kubelet sends TERM, the trap writes a file on a hostPath and exits.
	marker := filepath.Join(m.Dir(), "disk", "terminated")
	createPod(t, c, m, "graceful", `trap "echo bye > /host/terminated; exit 0" TERM; while true; do sleep 1; done`)
	waitRunning(t, c, "graceful")
	start := time.Now()
	if err := c.Client.Delete(context.Background(), pod("graceful")); err != nil {
		t.Fatal(err)
	}
	waitGonePod(t, c, "graceful", time.Minute)
	if b, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(b)) != "bye" {
		t.Errorf("the container's TERM trap did not run: %q, %v", b, err)
	}
	t.Logf("graceful deletion carried out by the kubelet in %s", time.Since(start).Round(100*time.Millisecond))

	// The power cut: every process of the machine dies at once.
	createPod(t, c, m, "victim", `while true; do sleep 1; done`)
	waitRunning(t, c, "victim")
	before, err := m.Processes("")
	if err != nil {
		t.Fatal(err)
	}
	for _, comm := range []string{"containerd", "containerd-shim", "kubelet", "sleep"} {
		if pids, _ := m.Processes(comm); len(pids) == 0 {
			t.Errorf("no %s runs on the machine before the power cut; processes: %v", comm, before)
		}
	}
	cut := time.Now()
	if out, err := bmc.IPMITool(context.Background(), "chassis", "power", "off"); err != nil {
		t.Fatalf("ipmitool chassis power off: %v: %s", err, out)
	}
	for _, pid := range before {
		for alive(pid) {
			if time.Since(cut) > 3*time.Second {
				t.Fatalf("process %d of the machine still alive %s after the power-off", pid, time.Since(cut))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Logf("all %d processes of the machine gone %s after the IPMI power-off", len(before), time.Since(cut).Round(time.Millisecond))

	// Power on: a new boot, the Node Ready again with the new boot ID.
	if out, err := bmc.IPMITool(context.Background(), "chassis", "power", "on"); err != nil {
		t.Fatalf("ipmitool chassis power on: %v: %s", err, out)
	}
	on := time.Now()
	newID := waitReady(t, c, m.Name(), bootID, 3*time.Minute)
	t.Logf("rebooted: boot ID %s, Node Ready %s after power-on", newID, time.Since(on).Round(100*time.Millisecond))
	if m.Boots() != 2 || newID != m.BootID() {
		t.Errorf("boots %d, boot ID %s, want 2 boots and %s", m.Boots(), newID, m.BootID())
	}
	if !m.DaemonRunning(daemon.Name) {
		t.Errorf("daemon %s did not start with the new boot", daemon.Name)
	}
}

// checkDaemon checks that the daemon runs inside the machine, that KillDaemon kills it alone
// and that StartDaemon starts it again.
func checkDaemon(t *testing.T, m *machine.Machine, name string) {
	t.Helper()
	pid := onlyProcess(t, m, "palisade-tick")
	kubelet := onlyProcess(t, m, "kubelet")
	if err := m.KillDaemon(name); err != nil {
		t.Fatal(err)
	}
	if alive(pid) || m.DaemonRunning(name) {
		t.Errorf("daemon %s (pid %d) alive after KillDaemon", name, pid)
	}
	if !alive(kubelet) {
		t.Errorf("KillDaemon(%s) killed the kubelet too", name)
	}
	if err := m.StartDaemon(name); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return m.DaemonRunning(name), nil
	}); err != nil {
		t.Errorf("daemon %s not running after StartDaemon: %v", name, err)
	}
}

// copyFile copies a program under a name of its own (its command name) into a temporary
// directory and returns the copy's path.
func copyFile(t *testing.T, src, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

func startCluster(t *testing.T) (*testbed.Cluster, *netns.LAN) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := testbed.Start(ctx, testbed.Options{NoCSIAttacher: true, Logf: t.Logf,
		Controllers: append(append([]string{}, testbed.DefaultControllers...), machine.Controllers...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	return c, netns.New(t)
}

func startBMC(t *testing.T) *ipmisim.BMC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bmc, err := ipmisim.Start(ctx, ipmisim.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bmc.Stop() })
	return bmc
}

// relayAPIServer makes the cluster's API server reachable from the LAN and returns its address.
func relayAPIServer(t *testing.T, c *testbed.Cluster, lan *netns.LAN) string {
	t.Helper()
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	return lan.Relay(t, u.Host)
}

// startMachine starts a machine whose kubelet reaches the API server at relay; a nil power
// is always on.
func startMachine(t *testing.T, c *testbed.Cluster, lan *netns.LAN, relay string, power machine.PowerSource, name string, index int, daemons ...machine.Daemon) *machine.Machine {
	t.Helper()
	m := machine.Start(t, machine.Options{Name: name, Index: index, LAN: lan, Cluster: c, APIServer: relay,
		Power: power, Images: []containerd.Image{workload}, Daemons: daemons})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("machine %s kubelet log:\n%s", name, m.LogTail("kubelet", 40))
			t.Logf("machine %s containerd log:\n%s", name, m.LogTail("containerd", 20))
		}
	})
	return m
}

// waitReady waits until the Node is Ready with a boot ID other than notBootID, and returns it.
func waitReady(t *testing.T, c *testbed.Cluster, name, notBootID string, timeout time.Duration) string {
	t.Helper()
	var id string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return false, nil
		}
		id = n.Status.NodeInfo.BootID
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && id != notBootID {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for Node %s Ready (boot ID other than %q): %v", name, notBootID, err)
	}
	return id
}

func pod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
}

// createPod runs script on the machine, with the machine's disk/ directory at /host.
func createPod(t *testing.T, c *testbed.Cluster, m *machine.Machine, name, script string) {
	t.Helper()
	p := pod(name)
	p.Spec = corev1.PodSpec{
		NodeName: m.Name(),
		Containers: []corev1.Container{{Name: "main", Image: workload.Name, ImagePullPolicy: corev1.PullNever,
			Command: []string{"/bin/sh", "-c", script}, VolumeMounts: []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}}},
		Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: filepath.Join(m.Dir(), "disk")}}}},
		TerminationGracePeriodSeconds: ptr(int64(30)),
	}
	if err := c.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

func waitRunning(t *testing.T, c *testbed.Cluster, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p := pod(name)
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return false, nil
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s Running: %v", name, err)
	}
}

func waitGonePod(t *testing.T, c *testbed.Cluster, name string, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := c.Client.Get(ctx, client.ObjectKeyFromObject(pod(name)), pod(name))
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s to be gone: %v", name, err)
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

func ptr[T any](v T) *T { return &v }

// "Kubelet down" and a partition from the API server both stop the Node's Lease while the
// pod's process keeps running, and both heal: the kubelet started again (or the link back)
// renews the Lease, and the pod's process is the same one throughout.
func TestMachineKubeletDownAndPartitionKeepPodsRunning(t *testing.T) {
	c, lan := startCluster(t)
	relay := relayAPIServer(t, c, lan)
	m := startMachine(t, c, lan, relay, nil, "machine-1", 1)
	waitReady(t, c, m.Name(), "", 3*time.Minute)
	createPod(t, c, m, "steady", `while true; do sleep 1; done`)
	waitRunning(t, c, "steady")
	pid := onlyProcess(t, m, "sh")

	apiServer, err := netns.ParseEndpoint(relay)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		fail, heal func() error
	}{
		{"kubelet down", m.KillKubelet, m.StartKubelet},
		{"cut off from the API server", func() error { return m.Net().Cut(apiServer) }, m.Net().Heal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			renewed := waitRenewal(t, c, m.Name(), time.Time{})
			if err := tc.fail(); err != nil {
				t.Fatal(err)
			}
			// The kubelet renews every 10s: 15s without a renewal is a stopped Lease.
			time.Sleep(15 * time.Second)
			if got := renewTime(t, c, m.Name()); !got.Equal(renewed) {
				t.Errorf("the Lease was renewed at %s during the fault (last before it %s)", got, renewed)
			}
			if !alive(pid) || onlyProcess(t, m, "sh") != pid {
				t.Fatalf("the pod's process %d did not survive the fault", pid)
			}
			if err := tc.heal(); err != nil {
				t.Fatal(err)
			}
			healed := time.Now()
			waitRenewal(t, c, m.Name(), renewed)
			t.Logf("Lease renewed %s after the heal; pod process %d ran throughout", time.Since(healed).Round(100*time.Millisecond), pid)
			if onlyProcess(t, m, "sh") != pid {
				t.Error("the pod's process was restarted")
			}
		})
	}
}

// onlyProcess is the PID of the machine's single process named comm.
func onlyProcess(t *testing.T, m *machine.Machine, comm string) int {
	t.Helper()
	pids, err := m.Processes(comm)
	if err != nil || len(pids) != 1 {
		t.Fatalf("processes %q on %s: %v, %v; want exactly one", comm, m.Name(), pids, err)
	}
	return pids[0]
}

func renewTime(t *testing.T, c *testbed.Cluster, node string) time.Time {
	t.Helper()
	l := &coordinationv1.Lease{}
	err := c.Client.Get(context.Background(), client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: node}, l)
	if apierrors.IsNotFound(err) {
		return time.Time{} // not created yet
	}
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// waitRenewal waits for a renewal after after (any with the zero time) and returns its time.
func waitRenewal(t *testing.T, c *testbed.Cluster, node string, after time.Time) time.Time {
	t.Helper()
	var got time.Time
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got = renewTime(t, c, node)
		return !got.IsZero() && got.After(after), nil
	})
	if err != nil {
		t.Fatalf("waiting for node %s to renew its Lease after %s: %v", node, after, err)
	}
	return got
}

// Three machines fit beside the control plane on this 2-core machine: all three turn Ready
// and run a pod each, with their own pod subnets.
func TestThreeMachines(t *testing.T) {
	c, lan := startCluster(t)
	relay := relayAPIServer(t, c, lan)
	var ms []*machine.Machine
	for i := 1; i <= 3; i++ {
		ms = append(ms, startMachine(t, c, lan, relay, nil, "machine-"+strconv.Itoa(i), i))
	}
	for _, m := range ms {
		waitReady(t, c, m.Name(), "", 3*time.Minute)
		createPod(t, c, m, "pod-"+m.Name(), `while true; do sleep 1; done`)
	}
	for i, m := range ms {
		p := pod("pod-" + m.Name())
		waitRunning(t, c, p.Name)
		if err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			t.Fatal(err)
		}
		if want := "10.88." + strconv.Itoa(i+1) + "."; !strings.HasPrefix(p.Status.PodIP, want) {
			t.Errorf("pod on %s has IP %q, want one in %s0/24", m.Name(), p.Status.PodIP, want)
		}
		var rss []string
		for _, comm := range []string{"kubelet", "containerd", "containerd-shim"} {
			pids, _ := m.Processes(comm)
			kib := 0
			for _, pid := range pids {
				kib += rssKiB(pid)
			}
			rss = append(rss, comm+"="+strconv.Itoa(kib/1024)+"MiB")
		}
		t.Logf("%s: pod IP %s, RSS %s", m.Name(), p.Status.PodIP, strings.Join(rss, " "))
	}
}

func rssKiB(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}
