package storagehost_test

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"

	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/test/testbed/netns"
	"palisade.dev/palisade/test/testbed/storagehost"
)

// TestServedOrRefused: a node is served until a reject rule in the storage host's namespace
// (through NFT's command) refuses it, and another node is still served.
func TestServedOrRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("network namespaces and nftables need root: run the tests as root (make test does)")
	}
	lan := netns.New(t)
	h := storagehost.Start(t, lan, "storage")
	n1, n2 := lan.AddNode("n1"), lan.AddNode("n2")
	if !h.Served(t, n1) || !h.Served(t, n2) {
		t.Fatal("nodes not served before any rule")
	}
	if nft := h.NFT(); len(nft) < 2 || nft[len(nft)-1] != "nft" || !strings.Contains(strings.Join(nft, " "), "netns exec "+h.Node().NetNS()) {
		t.Errorf("NFT() = %q; want ip netns exec %s nft", nft, h.Node().NetNS())
	}
	h.RunNFT(t, "add", "table", "inet", "t")
	h.RunNFT(t, "add", "chain", "inet", "t", "in", "{ type filter hook input priority 0; }")
	h.RunNFT(t, "add", "rule", "inet", "t", "in", "ip", "saddr", n1.IP(), "reject")
	if h.Served(t, n1) {
		t.Error("node n1 served behind a reject rule")
	}
	if !h.Served(t, n2) {
		t.Error("node n2 refused by a rule for n1")
	}
	if out := h.RunNFT(t, "list", "table", "inet", "t"); !strings.Contains(out, n1.IP()) {
		t.Errorf("the table read back does not name n1:\n%s", out)
	}
}

// TestServeTLS: a handler served on the storage host answers a client of the CA's controller
// certificate at the host's address.
func TestServeTLS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("network namespaces need root: run the tests as root (make test does)")
	}
	lan := netns.New(t)
	h := storagehost.Start(t, lan, "storage")
	certs := storagehost.WriteCerts(t, t.TempDir(), h.IP())
	log := testr.New(t)
	cert, err := pki.KeyPairSource(certs.CertFile, certs.KeyFile, log)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pki.CAPoolSource(certs.CAFile, log)
	if err != nil {
		t.Fatal(err)
	}
	addr := h.ServeTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(r.TLS.VerifiedChains[0][0].Subject.CommonName))
	}), pki.ServerTLSConfig(0, cert, pool))
	if !strings.HasPrefix(addr, h.IP()+":") {
		t.Errorf("ServeTLS listens on %s, want the host's address %s", addr, h.IP())
	}
	resp, err := certs.HTTPClient(t, certs.Client).Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	if b.String() != storagehost.ControllerName {
		t.Errorf("the server saw client %q, want %q", b.String(), storagehost.ControllerName)
	}
	if _, err := certs.HTTPClient(t, nil).Get("https://" + addr + "/"); err == nil {
		t.Error("a client without a certificate was served")
	}
}
