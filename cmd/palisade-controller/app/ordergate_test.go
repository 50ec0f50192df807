package app

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/channel"
	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/test/testbed"
)

// The heartbeat server agents() builds, under leader election, hands an order set on it to the
// node's agent only while this replica holds the leader-election Lease, as read from the real API
// server: withheld while another holds it, handed out once this replica does, and withheld again
// once another holds it and the last passed check has gone stale. This is the wiring of
// withLeaderGate into the server the controller runs (the gate itself: TestRecentLeaderCheck,
// TestCommandWithheldWhenRefused).
func TestAgentsHandOrdersOnlyWhileThisReplicaHoldsTheLease(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	c := testbed.StartT(t, testbed.Options{NoCSIAttacher: true, Controllers: []string{"serviceaccount-token-controller"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dir := t.TempDir()
	ca, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.IssueServer([]string{"127.0.0.1"})
	if err == nil {
		err = server.WriteFiles(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	}
	if err != nil {
		t.Fatal(err)
	}
	agentPair, err := ca.IssueAgent("node-a")
	if err == nil {
		err = agentPair.WriteFiles(filepath.Join(dir, "agent.crt"), filepath.Join(dir, "agent.key"))
	}
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()

	const leaseNS = "default"
	held := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: leaseNS, Name: LeaderElectionID},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("other"), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	if err := c.Client.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	holdBy := func(who string) {
		t.Helper()
		held.Spec.HolderIdentity, held.Spec.RenewTime = ptr.To(who), &metav1.MicroTime{Time: time.Now()}
		if err := c.Client.Update(ctx, held); err != nil {
			t.Fatal(err)
		}
	}

	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{LeaderElection: true, leaderNamespace: leaseNS, leaderIdentity: "me",
		Agents: channel.ServerOptions{Addr: addr, CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), CAFile: caFile}}
	heard := make(chan string, 100) // the fences' read-back wake is told every heartbeat (readback.go)
	_, srv, err := agents(mgr, o, func(hb agentwire.Heartbeat) {
		select {
		case heard <- hb.Node:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer runManager(t, ctx, cancel, mgr)()

	cl, err := channel.NewClient(channel.ClientOptions{Address: addr, CertFile: filepath.Join(dir, "agent.crt"), KeyFile: filepath.Join(dir, "agent.key"), CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seq := uint64(0)
	send := func() (*agentwire.Command, error) {
		seq++
		sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
		defer scancel()
		return cl.Send(sctx, agentwire.Report{Node: "node-a", Seq: seq, IntervalMillis: 1000, SentAt: time.Now()})
	}
	order := agentwire.Command{ID: "fence-node-a/executor", Action: agentwire.ActionTerminate}
	srv.SetCommand("node-a", order)

	// The server starts with the manager: heartbeat until it answers.
	var cmd *agentwire.Command
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if cmd, err = send(); err == nil {
			break
		}
		if !strings.Contains(err.Error(), "connection refused") || time.Now().After(deadline) {
			t.Fatalf("heartbeat: %v", err)
		}
	}
	if cmd != nil {
		t.Fatalf("order %+v handed to the agent while the Lease is held by another replica", cmd)
	}
	select {
	case node := <-heard:
		if node != "node-a" {
			t.Errorf("the heartbeat hook was told of node %q, want node-a", node)
		}
	default:
		t.Error("the heartbeat server accepted a heartbeat without telling the hook agents() was given")
	}

	holdBy("me")
	if cmd, err = send(); err != nil || cmd == nil || cmd.ID != order.ID {
		t.Fatalf("heartbeat once this replica holds the Lease: order %+v, %v; want %s", cmd, err, order.ID)
	}

	holdBy("other")
	time.Sleep(orderCheckTTL + 200*time.Millisecond) // the check that passed goes stale
	if cmd, err = send(); err != nil || cmd != nil {
		t.Fatalf("heartbeat once another replica holds the Lease again: order %+v, %v; want none", cmd, err)
	}
}
