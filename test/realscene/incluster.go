package realscene

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"palisade.dev/palisade/test/testbed"
	"palisade.dev/palisade/test/testbed/machine"
)

// What a workload installed into the scene as pods needs besides the kubelet, as a real
// cluster has it (Options.InCluster):
//   - kube-proxy on every machine (nftables mode), so that Services' ClusterIPs work, the
//     Service kubernetes' among them (testbed.Options.InCluster points it at the API server's
//     relay);
//   - a cluster DNS, the real CoreDNS with its kubernetes plugin, on the LAN beside the control
//     plane: the machines' kubelets name it as clusterDNS;
//   - pod networking between machines: each machine routes the other machines' pod subnets to
//     them, and masquerades its pods' traffic to anything outside the pod network (the API
//     server's relay, the BMCs, the storage), as a CNI plugin's outgoing NAT does;
//   - a machine's own /run/containerd and /var/lib/palisade in its mount namespace, where a
//     DaemonSet's hostPath volumes name them.

// Names in the scene's in-cluster set-up.
const (
	// KubeProxyDaemon is the name of the machines' kube-proxy daemon.
	KubeProxyDaemon = "kube-proxy"
	// ClusterDomain is the cluster DNS domain.
	ClusterDomain = "cluster.local"
	podNetwork    = "10.88.0.0/16"
)

// inCluster is the in-cluster set-up's state: the kube-proxy kubeconfig and the DNS address.
type inCluster struct {
	kubeProxy  string // kube-proxy's binary
	kubeconfig string // user system:kube-proxy (bound to system:node-proxier by the API server)
	dns        string // CoreDNS's address, the LAN's host IP
}

func (s *Scene) setupInCluster(t testing.TB, ctx context.Context) *inCluster {
	t.Helper()
	if err := s.Cluster.SetKubernetesEndpoint(ctx, s.Relay); err != nil {
		t.Fatal(err)
	}
	ic := &inCluster{kubeconfig: filepath.Join(t.TempDir(), "kube-proxy.kubeconfig"), dns: s.LAN.HostIP()}
	var err error
	if ic.kubeProxy, err = testbed.Binary("kube-proxy"); err != nil {
		t.Fatal(err)
	}
	if err := s.Cluster.UserKubeconfigVia(ic.kubeconfig, s.Relay, "system:kube-proxy"); err != nil {
		t.Fatal(err)
	}
	s.serveDNS(t, ctx, ic.dns)
	return ic
}

// daemon is a machine's kube-proxy. Conntrack sysctls are left alone (they are the host's
// kernel's, shared by every namespace).
func (ic *inCluster) daemon() machine.Daemon {
	return machine.Daemon{Name: KubeProxyDaemon, Path: ic.kubeProxy, Args: []string{
		"--kubeconfig=" + ic.kubeconfig, "--hostname-override=$(NODE_NAME)", "--proxy-mode=nftables",
		"--cluster-cidr=" + podNetwork, "--conntrack-max-per-core=0", "--conntrack-min=0",
		"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--healthz-bind-address=$(NODE_IP):10256", "--metrics-bind-address=127.0.0.1:10249", "--v=2",
	}}
}

// machineOptions are the in-cluster additions to a machine's options.
func (ic *inCluster) machineOptions(o *machine.Options) {
	o.ClusterDNS = ic.dns
	o.Binds = append(o.Binds, machine.Bind{Path: "/run/containerd", Dir: machine.RunDir},
		machine.Bind{Path: "/var/lib/palisade", Dir: "var-lib-palisade"})
	o.Daemons = append(o.Daemons, ic.daemon())
}

// connectPods gives every machine a default route (the LAN's host), routes every machine's pod
// subnet from the others and masquerades the pods' traffic that leaves the pod network.
func (s *Scene) connectPods(t testing.TB, ctx context.Context) {
	t.Helper()
	for i, m := range s.Machines {
		// A node's gateway: the kernel routes a host-network process's packets to a ClusterIP
		// before kube-proxy's rules rewrite their destination.
		if err := m.Net().Route("default", s.LAN.HostIP()); err != nil {
			t.Fatal(err)
		}
		for j, other := range s.Machines {
			if i != j {
				if err := m.Net().Route(other.PodSubnet(), other.Net().IP()); err != nil {
					t.Fatal(err)
				}
			}
		}
		nat := fmt.Sprintf(`table ip palisade-pod-nat {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr %s ip daddr != %s masquerade
	}
}
`, m.PodSubnet(), podNetwork)
		cmd := m.Net().Command(ctx, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(nat)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("masquerading the pods of %s: %v: %s", m.Name(), err, out)
		}
	}
}

// serveDNS runs CoreDNS on addr:53 (UDP and TCP), answering for the cluster domain from the
// API server, and waits until it resolves the Service kubernetes.
func (s *Scene) serveDNS(t testing.TB, ctx context.Context, addr string) {
	t.Helper()
	bin, err := testbed.Binary("coredns")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	corefile := fmt.Sprintf(`.:53 {
    bind %s
    errors
    log
    kubernetes %s in-addr.arpa {
        kubeconfig %s
    }
}
`, addr, ClusterDomain, s.Cluster.KubeconfigPath())
	if err := os.WriteFile(filepath.Join(dir, "Corefile"), []byte(corefile), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "coredns.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-conf", filepath.Join(dir, "Corefile"))
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // it dies with the test
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = log.Close()
		if t.Failed() {
			t.Logf("coredns log (tail):\n%s", testbed.TailFile(log.Name(), 20))
		}
	})
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(addr, "53"))
	}}
	name := "kubernetes.default.svc." + ClusterDomain
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited: // it could not bind: whoever answers is not this scene's
			return false, fmt.Errorf("coredns exited")
		default:
		}
		ips, err := r.LookupHost(ctx, name)
		return err == nil && len(ips) == 1 && ips[0] == testbed.KubernetesServiceIP, nil
	})
	if err != nil {
		t.Fatalf("CoreDNS on %s did not resolve %s to %s within a minute: %v\n%s", addr, name, testbed.KubernetesServiceIP, err, testbed.TailFile(log.Name(), 20))
	}
}
