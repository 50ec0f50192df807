package e2e

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// cutLink is a TCP proxy the test owns between an agent and the controller: Cut severs the
// link (no new connection is accepted, open ones are closed).
type cutLink struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newLink(t *testing.T, to string) *cutLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &cutLink{ln: ln}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			l.mu.Lock()
			l.conns = append(l.conns, in, out)
			l.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(l.Cut)
	return l
}

func (l *cutLink) Addr() string { return l.ln.Addr().String() }

func (l *cutLink) Cut() {
	l.ln.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}

// A node cut off from the API server and the controller fences itself: its agent terminates
// the workload on the real runtime; the controller, relying on it, counts the node fenced only
// after the policy's safe time without any signal, and records that it relied on it.
func TestSelfFence(t *testing.T) {
	s := startExecutorScene(t, sceneOptions{
		kubeletHealthy: true,
		methods: func(v1alpha1.Method) []v1alpha1.Method {
			return []v1alpha1.Method{{Name: "self-fence", Type: v1alpha1.MethodSelfFence, Timeout: &metav1.Duration{Duration: time.Minute},
				SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: 8 * time.Second}}}}
		},
		workload: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"},
	})
	apiserver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	t.Cleanup(apiserver.Close)
	link := newLink(t, s.addr)
	// It promises to fence itself within 4 s of its isolation (--self-fence-after plus twice
	// its petted watchdog's timeout), which with 4 heartbeat intervals fits the policy's
	// safeAfter of 8 s. A file stands in for the watchdog device: nothing resets this node, and
	// the agent's own termination is what stops the workload here.
	wd := filepath.Join(t.TempDir(), "watchdog")
	if err := os.WriteFile(wd, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.agent(t, link.Addr(), "--self-fence-after", "2s", "--executor-timeout", "2s", "--api-server-healthz", apiserver.URL,
		"--watchdog-device", wd, "--watchdog-timeout", "1s", "--watchdog-stand-in")
	time.Sleep(3 * time.Second)
	if !s.workloadRunning(t) {
		t.Fatal("the agent fenced itself while it reached the controller and the API server")
	}

	n1 := s.env.Node(1)
	n1.PauseHeartbeats() // cut off from the API server ...
	apiserver.Close()
	link.Cut() // ... and from the controller
	nf := waitFence(t, s.env.Cluster, n1.Name(), 90*time.Second, phaseIs(v1alpha1.PhaseReleased))
	if st, reason, msg := condition(nf, v1alpha1.ConditionFenced); st != "True" || reason != "SelfFenceSafeTimePassed" {
		t.Errorf("Fenced condition = %s/%s (%s), want True/SelfFenceSafeTimePassed", st, reason, msg)
	}
	if s.workloadRunning(t) {
		t.Error("the workload still runs although the controller relied on the node's self-fence")
	}
	if offs, err := n1.BMC.OffCommands(); err != nil || offs != 0 {
		t.Errorf("%d power-off commands reached the BMC (err %v)", offs, err)
	}
}

// A SelfFence method whose node's agent does not fence itself (run without --self-fence-after,
// as the chart installs it by default) is not relied on: cut off like TestSelfFence's node, the
// node's silence for safeAfter would have been confirmed as its self-fence, and its pods
// force-deleted while its workload ran on. Now the method fails at once with SelfFenceNotArmed
// and the chain goes on to IPMI, which powers the node off before anything is released.
func TestSelfFenceNotArmedIsNotRelied(t *testing.T) {
	s := startExecutorScene(t, sceneOptions{
		kubeletHealthy: true,
		methods: func(ipmi v1alpha1.Method) []v1alpha1.Method {
			return []v1alpha1.Method{{Name: "self-fence", Type: v1alpha1.MethodSelfFence, Timeout: &metav1.Duration{Duration: time.Minute},
				SelfFence: &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: 8 * time.Second}}}, ipmi}
		},
		workload: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"},
	})
	link := newLink(t, s.addr)
	s.diesWithPower(t, s.agent(t, link.Addr())) // no --self-fence-after: it never fences itself
	time.Sleep(3 * time.Second)                 // heard by the controller

	n1 := s.env.Node(1)
	n1.PauseHeartbeats() // cut off from the API server ...
	link.Cut()           // ... and from the controller
	nf := waitFence(t, s.env.Cluster, n1.Name(), 90*time.Second, phaseIs(v1alpha1.PhaseReleased))
	var notArmed bool
	for _, st := range nf.Status.Steps {
		notArmed = notArmed || st.Method == "self-fence" && st.State == v1alpha1.StepFailed && st.Reason == "SelfFenceNotArmed"
	}
	if !notArmed {
		t.Errorf("steps %v: want the self-fence failed with SelfFenceNotArmed", trace(nf))
	}
	if st, reason, msg := condition(nf, v1alpha1.ConditionFenced); st != "True" || reason != v1alpha1.ReasonPowerOffConfirmed {
		t.Errorf("Fenced condition = %s/%s (%s), want True/%s", st, reason, msg, v1alpha1.ReasonPowerOffConfirmed)
	}
	if offs, err := n1.BMC.OffCommands(); err != nil || offs == 0 {
		t.Errorf("%d power-off commands reached the BMC (err %v): want the chain to have gone on to IPMI", offs, err)
	}
}
