package main

import (
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// agentCert issues a client certificate for node into e's directory and returns its files.
func (e *env) agentCert(t testing.TB, node string) (cert, key string) {
	t.Helper()
	pair, err := e.ca.IssueAgent(node)
	cert, key = filepath.Join(e.dir, node+".crt"), filepath.Join(e.dir, node+".key")
	if err == nil {
		err = pair.WriteFiles(cert, key)
	}
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// waitPeerView waits until every reporter's latest heartbeat says, of node, reachable.
func waitPeerView(t *testing.T, e *env, node string, reachable bool, reporters []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		snap := e.server.Snapshot()
		agreed := 0
		for _, r := range reporters {
			for _, p := range snap[r].Peers {
				if p.Node == node && p.Reachable == reachable {
					agreed++
				}
			}
		}
		if agreed == len(reporters) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %d of %v report %s reachable=%v; snapshot: %+v", within, agreed, reporters, node, reachable, snap)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitProbedBy waits until node's latest heartbeat names exactly probers as the peers whose
// probes it acknowledged.
func waitProbedBy(t *testing.T, e *env, node string, probers []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var got []string
		for _, p := range e.server.Snapshot()[node].ProbedBy {
			got = append(got, p.Node)
		}
		slices.Sort(got)
		if slices.Equal(got, probers) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %s acknowledged the probes of %v, want %v", within, node, got, probers)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPeersProbeEachOther runs three real agents against a real Server: the Server assigns each
// the other two as peers (the ring with k=3 and n=3), the agents probe each other's probe ports
// and report it, and each acknowledges its probers and reports them too. An agent killed is reported unreachable within a few intervals; a node whose
// agent is dead but whose kubelet port still accepts counts as reachable (not dead).
func TestPeersProbeEachOther(t *testing.T) {
	const interval = 500 * time.Millisecond
	e := newEnv(t, "127.0.0.1:0")
	k := newKubelet()
	defer k.srv.Close()
	kubeletPort, err := net.Listen("tcp", "127.0.0.1:0") // node-c's "kubelet port"
	if err != nil {
		t.Fatal(err)
	}
	defer kubeletPort.Close()
	go func() {
		for {
			c, err := kubeletPort.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	nodes := []string{"node-a", "node-b", "node-c", "node-d"}
	procs := map[string]*proc{}
	for _, n := range nodes {
		cert, key := e.agentCert(t, n)
		extra := []string{"--node-name", n, "--cert", cert, "--key", key}
		if n == "node-c" {
			extra = append(extra, "--kubelet-port", strconv.Itoa(kubeletPort.Addr().(*net.TCPAddr).Port))
		}
		procs[n] = e.startAgent(t, e.server.Addr(), k.srv.URL, interval, extra...)
	}
	// With n=4 and k=3 every node probes, and is probed by, the three others.
	waitPeerView(t, e, "node-d", true, []string{"node-a", "node-b", "node-c"}, 5*time.Second)
	waitPeerView(t, e, "node-c", true, []string{"node-a", "node-b", "node-d"}, 5*time.Second)
	// Each agent acknowledges its probers' probes and says so: the controller's sight of the
	// paths their agents count for their self-fence.
	waitProbedBy(t, e, "node-a", []string{"node-b", "node-c", "node-d"}, 5*time.Second)
	hb := e.server.Snapshot()["node-a"]
	if len(hb.ProbeAddresses) != 1 || len(hb.Peers) != 3 {
		t.Fatalf("node-a: probe addresses %v (want its probe port only: --kubelet-port 0), %d peer reports (want 3)", hb.ProbeAddresses, len(hb.Peers))
	}

	start := time.Now()
	_ = procs["node-d"].cmd.Process.Kill()
	<-procs["node-d"].done
	waitPeerView(t, e, "node-d", false, []string{"node-a", "node-b", "node-c"}, 4*interval+time.Second)
	t.Logf("a killed agent was reported unreachable by all its peers after %s", time.Since(start).Round(10*time.Millisecond))
	waitProbedBy(t, e, "node-a", []string{"node-b", "node-c"}, 4*interval+time.Second)
	for _, r := range []string{"node-a", "node-b", "node-c"} {
		for _, p := range e.server.Snapshot()[r].Peers {
			if p.Node == "node-d" && !p.At.After(start) {
				t.Errorf("%s's report on node-d is from before the kill (%v): the Server kept an old result", r, p.At)
			}
		}
	}

	_ = procs["node-c"].cmd.Process.Kill()
	<-procs["node-c"].done
	time.Sleep(4 * interval) // several probe rounds
	waitPeerView(t, e, "node-c", true, []string{"node-a", "node-b"}, time.Second)
	checkJSONLogs(t, procs["node-a"].logs(), "peers to probe", "peer reachability")
}
