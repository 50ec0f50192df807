package gateway_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"palisade.dev/palisade/providers/agent/gateway"
	"palisade.dev/palisade/test/testbed/netns"
	"palisade.dev/palisade/test/testbed/storagehost"
)

// storage is a storage host (storagehost) with the gateway's configuration: its nftables run in
// the host's namespace.
type storage struct {
	*storagehost.Host
	cfg gateway.Config
}

func startStorage(t *testing.T, lan *netns.LAN) *storage {
	t.Helper()
	h := storagehost.Start(t, lan, "storage")
	return &storage{Host: h, cfg: gateway.Config{NFT: h.NFT(), StateDir: t.TempDir()}}
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
	if !s.Served(t, n1) {
		t.Fatal("node n1 not served before any fence: the scene proves nothing")
	}

	if err := g.Fence(ctx, "n1", 5, []netip.Addr{addr(t, n1)}); err != nil {
		t.Fatal(err)
	}
	if s.Served(t, n1) {
		t.Error("fenced node n1 served; want refused")
	}
	if !s.Served(t, n2) {
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
	if s.Served(t, n1) {
		t.Error("node n1 served after a refused unfence")
	}

	// The gateway's ruleset is lost (the storage host rebooted); a new gateway puts it back.
	s.RunNFT(t, "delete", "table", "inet", gateway.DefaultTable)
	if !s.Served(t, n1) {
		t.Fatal("node n1 not served with the table deleted: the reboot scene proves nothing")
	}
	g, err = gateway.New(ctx, s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.Served(t, n1) {
		t.Error("after the gateway's restart node n1 is served; want refused again")
	}

	// Unfenced under a newer token: served again; a replay of the old fence is refused.
	if err := g.Unfence(ctx, "n1", 6); err != nil {
		t.Fatal(err)
	}
	if !s.Served(t, n1) {
		t.Error("node n1 not served after its unfence")
	}
	if st, err := g.Check(ctx, "n1"); err != nil || st.Fenced || len(st.Rejected) != 0 {
		t.Errorf("Check(n1) after the unfence = %+v, %v; want nothing rejected", st, err)
	}
	if err := g.Fence(ctx, "n1", 5, []netip.Addr{addr(t, n1)}); !errors.As(err, &stale) {
		t.Errorf("a replayed fence with token 5 after the unfence with 6: %v; want a refusal", err)
	}
	if !s.Served(t, n1) {
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
