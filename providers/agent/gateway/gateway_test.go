package gateway_test

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"palisade.dev/palisade/providers/agent/gateway"
	"palisade.dev/palisade/test/testbed/netns"
)

// storage is a storage host in its own network namespace serving TCP (a stand-in for an iSCSI
// or NFS service: what the fence must stop is the node reaching it at all), with the gateway's
// nftables run in that namespace.
type storage struct {
	host *netns.Node
	addr string
	cfg  gateway.Config
}

func startStorage(t *testing.T, lan *netns.LAN) *storage {
	t.Helper()
	host := lan.AddNode("storage")
	ln, err := host.Listen("tcp", host.IP()+":3260")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.WriteString(c, "block device\n"); c.Close() }()
		}
	}()
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Fatal(err)
	}
	return &storage{host: host, addr: ln.Addr().String(),
		cfg: gateway.Config{NFT: []string{ip, "netns", "exec", host.NetNS(), "nft"}, StateDir: t.TempDir()}}
}

// reach dials the storage service from n and says whether it served; refused says whether it
// was refused outright (the gateway's reject) rather than served or timed out.
func (s *storage) reach(t *testing.T, n *netns.Node) (served, refused bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := n.Dial(ctx, "tcp", s.addr)
	if err != nil {
		return false, errors.Is(err, syscall.ECONNREFUSED)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	b, err := io.ReadAll(c)
	return err == nil && string(b) == "block device\n", false
}

func addr(t *testing.T, n *netns.Node) netip.Addr {
	t.Helper()
	return netip.MustParseAddr(n.IP())
}

// TestGatewayFencesOffTheStorage: on real nftables between network namespaces, a fenced node is
// refused by the storage service while another node is still served; the ruleset read back
// shows the fence; an unfence lets it in again; a fence or unfence with an older token changes
// nothing and says so; and a gateway that lost its ruleset (a rebooted storage host) puts its
// fences back when it starts.
func TestGatewayFencesOffTheStorage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("network namespaces and nftables need root: run the tests as root (make test does)")
	}
	lan := netns.New(t)
	s := startStorage(t, lan)
	n1, n2 := lan.AddNode("n1"), lan.AddNode("n2")
	ctx := context.Background()
	g, err := gateway.New(ctx, s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if served, _ := s.reach(t, n1); !served {
		t.Fatal("node n1 not served before any fence: the scene proves nothing")
	}

	if err := g.Fence(ctx, "n1", 5, []netip.Addr{addr(t, n1)}); err != nil {
		t.Fatal(err)
	}
	if served, refused := s.reach(t, n1); served || !refused {
		t.Errorf("fenced node n1: served %v, refused %v; want refused", served, refused)
	}
	if served, _ := s.reach(t, n2); !served {
		t.Error("node n2, not fenced, is not served")
	}
	st, err := g.Check(ctx, "n1")
	if err != nil || !st.Fenced || st.Token != 5 || len(st.Rejected) != 1 || st.Rejected[0] != addr(t, n1) {
		t.Errorf("Check(n1) = %+v, %v; want fenced under token 5, rejecting %s", st, err, n1.IP())
	}
	if st, err := g.Check(ctx, "n2"); err != nil || st.Fenced {
		t.Errorf("Check(n2) = %+v, %v; want not fenced", st, err)
	}

	// A late unfence of an earlier fence is refused, and the fence holds.
	var stale *gateway.StaleTokenError
	if err := g.Unfence(ctx, "n1", 4); !errors.As(err, &stale) || !strings.Contains(err.Error(), "older than token 5") {
		t.Errorf("Unfence with token 4 after 5: %v; want a refusal", err)
	}
	if served, _ := s.reach(t, n1); served {
		t.Error("node n1 served after a refused unfence")
	}

	// The gateway's ruleset is lost (the storage host rebooted); a new gateway puts it back.
	if out, err := exec.Command(s.cfg.NFT[0], append(s.cfg.NFT[1:], "delete", "table", "inet", gateway.DefaultTable)...).CombinedOutput(); err != nil {
		t.Fatalf("deleting the table: %v: %s", err, out)
	}
	if served, _ := s.reach(t, n1); !served {
		t.Fatal("node n1 not served with the table deleted: the reboot scene proves nothing")
	}
	g, err = gateway.New(ctx, s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if served, refused := s.reach(t, n1); served || !refused {
		t.Errorf("after the gateway's restart node n1: served %v, refused %v; want refused again", served, refused)
	}

	// Unfenced under a newer token: served again; a replay of the old fence is refused.
	if err := g.Unfence(ctx, "n1", 6); err != nil {
		t.Fatal(err)
	}
	if served, _ := s.reach(t, n1); !served {
		t.Error("node n1 not served after its unfence")
	}
	if st, err := g.Check(ctx, "n1"); err != nil || st.Fenced || len(st.Rejected) != 0 {
		t.Errorf("Check(n1) after the unfence = %+v, %v; want nothing rejected", st, err)
	}
	if err := g.Fence(ctx, "n1", 5, []netip.Addr{addr(t, n1)}); !errors.As(err, &stale) {
		t.Errorf("a replayed fence with token 5 after the unfence with 6: %v; want a refusal", err)
	}
	if served, _ := s.reach(t, n1); !served {
		t.Error("node n1 refused after a replayed, refused fence")
	}
	if g.Token("n1") != 6 {
		t.Errorf("token of n1 = %d, want 6", g.Token("n1"))
	}
	raw, err := os.ReadFile(filepath.Join(s.cfg.StateDir, gateway.StateFile))
	if err != nil || !strings.Contains(string(raw), `"token": 6`) {
		t.Errorf("state file %q (%v): want token 6 recorded", raw, err)
	}
}

// TestGatewayRefusesUnreadableState: fences it cannot read are not silently forgotten.
func TestGatewayRefusesUnreadableState(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, gateway.StateFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := gateway.New(context.Background(), gateway.Config{NFT: []string{"true"}, StateDir: dir})
	if err == nil || !strings.Contains(err.Error(), "unreadable") || !strings.Contains(err.Error(), gateway.StateFile) {
		t.Errorf("New with a garbled state file: %v; want an error naming it", err)
	}
	if _, err := gateway.New(context.Background(), gateway.Config{NFT: []string{"true"}}); err == nil {
		t.Error("New without a state directory: nil error")
	}
}
