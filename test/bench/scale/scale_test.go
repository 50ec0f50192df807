package scale

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/gobin"
)

const steadyWindow = 30 * time.Second

// floorSettle is how long after the rack its floor (rackFloor) waits: the fences' recovery looks
// are over by then.
const floorSettle = 15 * time.Second

// sizes are the node counts to measure: $PALISADE_SCALE_SIZES (e.g. "500,1000"), else 500.
func sizes(b *testing.B) []int {
	v := os.Getenv("PALISADE_SCALE_SIZES")
	if v == "" {
		v = "500"
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2*rackSize {
			b.Fatalf("PALISADE_SCALE_SIZES=%q: each size must be a number of nodes ≥ %d (a rack of %d and the %d nodes of its floor)", v, 2*rackSize, rackSize, rackSize)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkScale prints one BENCH scale line per size.
func BenchmarkScale(b *testing.B) {
	bin := buildController(b)
	for _, n := range sizes(b) {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for range b.N {
				measure(b, bin, n)
			}
		})
	}
}

func buildController(b *testing.B) string {
	bin, err := gobin.Build("cmd/palisade-controller")
	if err != nil {
		b.Fatal(err)
	}
	return bin
}

// given are the addresses freeAddr handed out. A port is free when picked but closed again
// until its user binds it, so a later pick may return it: the agents' address once came back as
// the controller's pprof address, and the controller exited at its start.
var given sync.Map

// freeAddr is a loopback address free now and not handed out before in this run.
func freeAddr(b *testing.B) string {
	for {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		addr := lis.Addr().String()
		_ = lis.Close()
		if _, taken := given.LoadOrStore(addr, true); !taken {
			return addr
		}
	}
}

func measure(b *testing.B, bin string, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := testbed.Start(ctx, testbed.Options{NoCSIAttacher: true,
		Controllers: []string{"garbage-collector-controller", "serviceaccount-token-controller"}})
	if err != nil {
		b.Fatalf("starting test bed (run make deps testbed): %v", err)
	}
	defer func() { _ = c.Stop() }()
	cfg := *c.Config
	cfg.QPS, cfg.Burst = 2000, 4000
	kube := kubernetesFor(b, &cfg)
	began := time.Now()
	if err := createNodes(ctx, kube, n); err != nil {
		b.Fatal(err)
	}
	b.Logf("setup: %d nodes, %d pods in %s", n, n*podsPerNode, time.Since(began).Round(time.Millisecond))
	if err := createPolicy(ctx, c); err != nil {
		b.Fatal(err)
	}
	off := &stopped{set: map[int]bool{}}
	gaps := &latencies{} // the gaps between each node's renewals
	go runLeases(ctx, kube, n, off, gaps)

	pk := issuePKI(b, n)
	proc := startController(b, c, bin, pk, n)
	defer proc.stop()
	peak := proc.watchPeak(b, n)
	lat := &latencies{}
	for i := 0; i < n; i++ {
		cl, err := channel.NewClient(channel.ClientOptions{Address: pk.addr, CertFile: pk.dir + "/" + nodeName(i) + ".crt",
			KeyFile: pk.dir + "/" + nodeName(i) + ".key", CAFile: pk.dir + "/ca.crt", Timeout: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		go runAgent(ctx, cl, i, n, off, lat)
	}
	proc.wait(b, 2*steadyWindow) // informers synced, every agent heard, caches warm
	// The controller's first look at each node adds its finalizer, and a look once its agent is
	// heard marks it, one API write each per node:
	// at 5000 nodes that outlasts the wait above, and would count in the steady window.
	proc.waitFinalizers(ctx, b, kube, n)
	b.Logf("every node carries the controller's finalizer and its agent's mark %s after the controller started", time.Since(proc.started).Round(time.Second))
	proc.wait(b, steadyWindow/3)
	peak.log(b, bin)
	_, _ = gaps.drain()
	s := proc.steady(ctx, b, kube, steadyWindow, lat)
	inWindow, _ := gaps.drain()
	b.Logf("steady window %s: the simulated kubelets: %s", steadyWindow, gapSummary(inWindow))
	lateness := proc.scrape(b, "palisade_lease_renewal_lateness_seconds", "")
	b.Logf("the controller saw 90%% of the renewals of the last 2 minutes come within %.1f s of their interval: the fast Dead waits %.1f s past a missed one",
		lateness, max(1, 2*lateness))
	proc.profile(b, bin, n)
	_, _, _ = lat.reset()
	before := proc.sample(b)
	queue0 := proc.queueTimes(b)
	load0 := takeLoad(ctx, kube)
	rack := rackRelease(ctx, b, c, kube, n)
	p99, count, errs := lat.reset()
	after := proc.sample(b)
	loadBetween(b, "during the rack", load0, takeLoad(ctx, kube))
	b.Logf("during the rack: %d heartbeats, %d failed, p99 %s; the controller has %d files open; RSS %s", count, errs, p99, after.openFiles, after.memory())
	b.Logf("during the rack: the NodeFence work queue: %s", queueBetween(queue0, proc.queueTimes(b)))
	bySeries, requests := delta(before.requests, after.requests)
	b.Logf("during the rack (%s): %.0f API requests by the controller, by method and code:%s", after.at.Sub(before.at).Round(100*time.Millisecond), requests, bySeries)
	// The floor once the rack's aftermath (its fences' recovery looks) has settled.
	proc.wait(b, floorSettle)
	load1 := takeLoad(ctx, kube)
	floor := rackFloor(ctx, b, kube, n)
	loadBetween(b, "during the floor", load1, takeLoad(ctx, kube))
	b.Logf("the rack's floor: %d other nodes' %d pods marked Failed and deleted by a plain client in one burst, %d nodes at once, in %s (the controller released the rack %s after its last confirmation, %s after its last window)",
		rackSize, rackSize*podsPerNode, fencesAtOnce(b), floor.Round(100*time.Millisecond), rack.fromConfirmed.Round(100*time.Millisecond), rack.afterWindows.Round(100*time.Millisecond))
	fmt.Printf("BENCH scale nodes=%d pods=%d rss_mib=%.1f cpu_pct=%.1f api_qps=%.1f hb_p99_ms=%.1f rack_release_s=%.1f rack_after_window_s=%.1f rack_from_request_s=%.1f rack_floor_s=%.1f renewal_lateness_s=%.1f\n",
		n, n*podsPerNode, s.rssMiB, s.cpuPct, s.apiQPS, s.hbP99ms, rack.fromConfirmed.Seconds(), rack.afterWindows.Seconds(), rack.fromRequest.Seconds(), floor.Seconds(), lateness)
}

// agentPKI is the agents' CA, the controller's server certificate and one client
// certificate per node, as cmd/palisade-controller and test/scenario set them up.
type agentPKI struct {
	dir, addr string
}

func issuePKI(b *testing.B, n int) agentPKI {
	p := agentPKI{dir: b.TempDir(), addr: freeAddr(b)}
	ca, err := pki.NewCA()
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(p.dir+"/ca.crt", ca.CertPEM(), 0o600); err != nil {
		b.Fatal(err)
	}
	pair, err := ca.IssueServer([]string{"127.0.0.1"})
	if err == nil {
		err = pair.WriteFiles(p.dir+"/server.crt", p.dir+"/server.key")
	}
	if err != nil {
		b.Fatal(err)
	}
	if err := forEach(n, func(i int) error {
		pair, err := ca.IssueAgent(nodeName(i))
		if err != nil {
			return err
		}
		return pair.WriteFiles(p.dir+"/"+nodeName(i)+".crt", p.dir+"/"+nodeName(i)+".key")
	}); err != nil {
		b.Fatal(err)
	}
	return p
}

// controller is the palisade-controller process under measurement.
type controller struct {
	cmd            *exec.Cmd
	started        time.Time
	metrics, pprof string
	logPath        string
	done           chan struct{} // closed when the process has ended, with err its Wait's error
	err            error
}

func startController(b *testing.B, c *testbed.Cluster, bin string, pk agentPKI, n int) *controller {
	kubeconfig := filepath.Join(pk.dir, "controller.kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		b.Fatal(err)
	}
	p := &controller{metrics: freeAddr(b), pprof: freeAddr(b), done: make(chan struct{})}
	p.cmd = exec.Command(bin, "--leader-elect=false", "--metrics-bind-address", p.metrics, "--pprof-bind-address", p.pprof,
		"--health-probe-bind-address", freeAddr(b), "--agent-listen-address", pk.addr,
		"--agent-tls-cert", pk.dir+"/server.crt", "--agent-tls-key", pk.dir+"/server.key", "--agent-ca", pk.dir+"/ca.crt")
	// PALISADE_SCALE_CONTROLLER_ARGS: more of the controller's flags, to measure a setting
	// (make bench-scale SIZES=5000 CONTROLLER_ARGS=--fence-concurrency=40).
	p.cmd.Args = append(p.cmd.Args, strings.Fields(os.Getenv("PALISADE_SCALE_CONTROLLER_ARGS"))...)
	p.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	logDir := os.Getenv("PALISADE_SCALE_PROFILES") // kept beside the profiles, to read after the run
	if logDir == "" {
		logDir = c.Dir
	}
	p.logPath = filepath.Join(logDir, fmt.Sprintf("scale-controller-%d.log", n))
	log, err := os.Create(p.logPath)
	if err != nil {
		b.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		b.Fatalf("starting palisade-controller: %v", err)
	}
	p.started = time.Now()
	go func() { p.err = p.cmd.Wait(); _ = log.Close(); close(p.done) }()
	return p
}

// wait waits d, and fails the bench at once if the controller ends meanwhile: every figure after
// that would be of no controller (a controller that exited at its start once left the bench
// waiting 10 minutes for finalizers).
func (p *controller) wait(b *testing.B, d time.Duration) {
	select {
	case <-p.done:
		p.ended(b)
	case <-time.After(d):
	}
}

// ended fails the bench with how the controller ended and the end of its log.
func (p *controller) ended(b *testing.B) {
	b.Fatalf("palisade-controller ended %s after it started (%v):\n%s",
		time.Since(p.started).Round(time.Second), p.err, testbed.TailFile(p.logPath, 5))
}

func (p *controller) stop() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// waitFinalizers waits until all n nodes carry the controller's fence-on-delete finalizer and its
// mark of a node whose agent it heard (v1alpha1.AnnotationAgent): one write each per node.
func (p *controller) waitFinalizers(ctx context.Context, b *testing.B, kube kubernetes.Interface, n int) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		// From the API server's watch cache: a consistent read of every node would load it.
		// A list that fails (the API server busy with the controller's first looks) is made again.
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		with := 0
		if err != nil {
			b.Logf("listing nodes, listing again: %v", err)
		} else {
			for i := range nodes.Items {
				_, marked := nodes.Items[i].Annotations[v1alpha1.AnnotationAgent]
				if marked && slices.Contains(nodes.Items[i].Finalizers, v1alpha1.FinalizerFenceOnDelete) {
					with++
				}
			}
		}
		if with >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("after 10 minutes %d of %d nodes carry the finalizer %s and the agent's mark %s (the last list's error: %v)", with, n, v1alpha1.FinalizerFenceOnDelete, v1alpha1.AnnotationAgent, err)
		}
		p.wait(b, 5*time.Second)
	}
}
