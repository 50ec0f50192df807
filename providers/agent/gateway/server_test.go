package gateway_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"

	"palisade.dev/palisade/config/gatewaywire"
	"palisade.dev/palisade/providers/agent/gateway"
	"palisade.dev/palisade/providers/agent/pki"
	"palisade.dev/palisade/test/testbed/netns"
	"palisade.dev/palisade/test/testbed/storagehost"
)

// served is a Gateway served over mutual TLS from inside the storage host's namespace.
type served struct {
	url    string // https://storage-ip:port
	client *http.Client
	certs  *storagehost.Certs
}

// serveGateway starts a storage host on a new LAN and a Gateway on its nftables, and serves it.
func serveGateway(t *testing.T) (*netns.LAN, *storage, *gateway.Gateway, *served) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("network namespaces and nftables need root: run the tests as root (make test does)")
	}
	lan := netns.New(t)
	s := startStorage(t, lan)
	g, err := gateway.New(context.Background(), s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lan, s, g, serve(t, s, g)
}

// serve starts NewHandler for g on the storage host, with a server certificate for its
// address, and returns it with a client holding the controller's certificate of the same CA.
func serve(t *testing.T, s *storage, g *gateway.Gateway) *served {
	t.Helper()
	certs := storagehost.WriteCerts(t, t.TempDir(), s.IP())
	cfg, err := gateway.ServerTLSConfig(certs.CertFile, certs.KeyFile, certs.CAFile, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	addr := s.ServeTLS(t, gateway.NewHandler(g, "gw-1", testr.New(t)), cfg)
	return &served{url: "https://" + addr, client: certs.HTTPClient(t, certs.Client), certs: certs}
}

// do sends a command and decodes the answer: a Fence on 200, an Error otherwise.
func (sv *served) do(t *testing.T, method, path string, body any) (int, gatewaywire.Fence, gatewaywire.Error) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, sv.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := sv.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var f gatewaywire.Fence
	var e gatewaywire.Error
	if resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(raw, &f)
	} else {
		err = json.Unmarshal(raw, &e)
	}
	if err != nil {
		t.Fatalf("%s %s: %d answer %q: %v", method, path, resp.StatusCode, raw, err)
	}
	return resp.StatusCode, f, e
}

// ruleset is the gateway's table as nft lists it.
func (s *storage) ruleset(t *testing.T) string {
	t.Helper()
	return s.RunNFT(t, "list", "table", "inet", gateway.DefaultTable)
}

// TestServerFencesOverMutualTLS: the controller's commands, over mutual TLS to the storage
// host, fence a node off the storage service and lift the fence; every answer is the ruleset
// read back; a replayed or late command is refused with 409 and changes nothing.
func TestServerFencesOverMutualTLS(t *testing.T) {
	lan, s, _, sv := serveGateway(t)
	n1 := lan.AddNode("n1")
	path := gatewaywire.PathFences + "n1"

	code, got, _ := sv.do(t, http.MethodGet, path, nil)
	if diff := cmp.Diff(gatewaywire.Fence{Gateway: "gw-1", Node: "n1"}, got); code != http.StatusOK || diff != "" {
		t.Errorf("GET before any fence: %d (-want +got):\n%s", code, diff)
	}

	fenced := gatewaywire.Fence{Gateway: "gw-1", Node: "n1", Token: 5, Fenced: true, Rejected: []string{n1.IP()}}
	code, got, e := sv.do(t, http.MethodPut, path, gatewaywire.FenceRequest{Token: 5, Addresses: []string{n1.IP()}})
	if diff := cmp.Diff(fenced, got); code != http.StatusOK || diff != "" {
		t.Fatalf("PUT token 5: %d %+v (-want +got):\n%s", code, e, diff)
	}
	if s.Served(t, n1) {
		t.Error("fenced node n1 served; want refused")
	}
	code, got, _ = sv.do(t, http.MethodGet, path, nil)
	if diff := cmp.Diff(fenced, got); code != http.StatusOK || diff != "" {
		t.Errorf("GET after the fence: %d (-want +got):\n%s", code, diff)
	}

	// A replayed fence of an older token, and unfences of older or the same token: refused.
	before := s.ruleset(t)
	for _, c := range []struct {
		method, path string
		body         any
		want         string
	}{
		{http.MethodPut, path, gatewaywire.FenceRequest{Token: 4, Addresses: []string{lan.HostIP()}}, "older than token 5"},
		{http.MethodDelete, path + "?token=4", nil, "older than token 5"},
		{http.MethodDelete, path + "?token=5", nil, "needs a newer token"},
	} {
		code, _, e := sv.do(t, c.method, c.path, c.body)
		if code != http.StatusConflict || e.Reason != gatewaywire.ReasonStaleToken || !strings.Contains(e.Message, c.want) {
			t.Errorf("%s %s: %d %+v; want 409 %s saying %q", c.method, c.path, code, e, gatewaywire.ReasonStaleToken, c.want)
		}
	}
	if after := s.ruleset(t); after != before {
		t.Errorf("refused commands changed the ruleset:\n%s\nwas:\n%s", after, before)
	}
	if s.Served(t, n1) {
		t.Error("node n1 served after refused unfences")
	}

	code, got, e = sv.do(t, http.MethodDelete, path+"?token=6", nil)
	if diff := cmp.Diff(gatewaywire.Fence{Gateway: "gw-1", Node: "n1", Token: 6}, got); code != http.StatusOK || diff != "" {
		t.Errorf("DELETE token 6: %d %+v (-want +got):\n%s", code, e, diff)
	}
	if !s.Served(t, n1) {
		t.Error("node n1 not served after its unfence")
	}
	// A retried unfence is carried out again; a replayed fence is not.
	if code, got, _ = sv.do(t, http.MethodDelete, path+"?token=6", nil); code != http.StatusOK || got.Fenced {
		t.Errorf("DELETE token 6 again: %d %+v; want 200, not fenced", code, got)
	}
	if code, _, e = sv.do(t, http.MethodPut, path, gatewaywire.FenceRequest{Token: 5, Addresses: []string{n1.IP()}}); code != http.StatusConflict {
		t.Errorf("PUT token 5 replayed after the unfence: %d %+v; want 409", code, e)
	}
	if !s.Served(t, n1) {
		t.Error("node n1 refused after a replayed fence")
	}
}

// TestServerRefusesBadRequests: malformed commands are answered 400 with a message that says
// what is wrong, and change nothing.
func TestServerRefusesBadRequests(t *testing.T) {
	_, _, g, sv := serveGateway(t)
	put := func(token int64, addrs ...string) gatewaywire.FenceRequest {
		return gatewaywire.FenceRequest{Token: token, Addresses: addrs}
	}
	for _, c := range []struct {
		name, method, path string
		body               any
		want               string
	}{
		{"prefix", http.MethodPut, "n1", put(1, "10.0.0.0/24"), `"10.0.0.0/24" is a prefix`},
		{"garbage", http.MethodPut, "n1", put(1, "10.0.0.1", "not-an-ip"), `"not-an-ip" is not an IP address`},
		{"no addresses", http.MethodPut, "n1", put(1), "no address to fence"},
		{"mapped", http.MethodPut, "n1", put(1, "::ffff:10.0.0.1"), "send the IPv4 address 10.0.0.1"},
		{"loopback", http.MethodPut, "n1", put(1, "127.0.0.1"), "not a node's address"},
		{"no token", http.MethodPut, "n1", put(0, "10.0.0.1"), "a fencing token is positive"},
		{"not JSON", http.MethodPut, "n1", "{token: 1", "reading the fence request"},
		{"bad node name", http.MethodPut, "N_1", put(1, "10.0.0.1"), `"N_1" in path`},
		{"bad node name GET", http.MethodGet, "n1..x", nil, "not a node name"},
		{"no node", http.MethodGet, "", nil, "not a node name"},
		{"DELETE without token", http.MethodDelete, "n1", nil, "?token=N"},
		{"DELETE bad token", http.MethodDelete, "n1?token=x", nil, `fencing token "x" is not a positive integer`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, e := sv.do(t, c.method, gatewaywire.PathFences+c.path, c.body)
			if code != http.StatusBadRequest || e.Reason != gatewaywire.ReasonBadRequest || !strings.Contains(e.Message, c.want) {
				t.Errorf("%d %+v; want 400 %s saying %q", code, e, gatewaywire.ReasonBadRequest, c.want)
			}
		})
	}
	if code, _, e := sv.do(t, http.MethodPost, gatewaywire.PathFences+"n1", nil); code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d %+v; want 405", code, e)
	}
	if tok := g.Token("n1"); tok != 0 {
		t.Errorf("token of n1 after bad requests = %d, want 0", tok)
	}
}

// TestServerRefusesUnverifiedClients: a client without a certificate, or with one of another
// CA, is refused at the TLS handshake, before any command.
func TestServerRefusesUnverifiedClients(t *testing.T) {
	lan, s, g, sv := serveGateway(t)
	n1 := lan.AddNode("n1")
	if code, _, e := sv.do(t, http.MethodPut, gatewaywire.PathFences+"n1", gatewaywire.FenceRequest{Token: 5, Addresses: []string{n1.IP()}}); code != http.StatusOK {
		t.Fatalf("PUT: %d %+v", code, e)
	}
	other, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	intruder, err := other.IssueAgent("intruder")
	if err != nil {
		t.Fatal(err)
	}
	for name, client := range map[string]*http.Client{
		"no certificate": sv.certs.HTTPClient(t, nil),
		"another CA's":   sv.certs.HTTPClient(t, intruder),
	} {
		req, err := http.NewRequest(http.MethodDelete, sv.url+gatewaywire.PathFences+"n1?token=99", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Errorf("client with %s certificate: %s; want refused at the handshake", name, resp.Status)
			continue
		}
		if !strings.Contains(err.Error(), "tls") {
			t.Errorf("client with %s certificate: %v; want a TLS error", name, err)
		}
	}
	// And by the handshake itself (TLS 1.2: the client sees the refusal in it).
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", strings.TrimPrefix(sv.url, "https://"),
		&tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}) //nolint:gosec // only the server's refusal is tested
	if err == nil {
		conn.Close()
		t.Error("a TLS 1.2 handshake without a client certificate succeeded")
	}
	if s.Served(t, n1) {
		t.Error("node n1 served: an unverified client lifted its fence")
	}
	if tok := g.Token("n1"); tok != 5 {
		t.Errorf("token of n1 = %d, want 5", tok)
	}
}

// TestServerReportsGatewayFailures: nft failing is 500 GatewayFailed, with nft's message.
func TestServerReportsGatewayFailures(t *testing.T) {
	dir := t.TempDir()
	nft, broken := filepath.Join(dir, "nft"), filepath.Join(dir, "broken")
	if err := os.WriteFile(nft, []byte("#!/bin/sh\ncat >/dev/null\nif [ -e "+broken+" ]; then echo 'Error: no such table' >&2; exit 1; fi\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(context.Background(), gateway.Config{NFT: []string{nft}, StateDir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gateway.NewHandler(g, "gw-1", testr.New(t)))
	t.Cleanup(srv.Close)
	sv := &served{url: srv.URL, client: srv.Client()}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPut, "n1", gatewaywire.FenceRequest{Token: 1, Addresses: []string{"10.0.0.1"}}},
		{http.MethodGet, "n1", nil},
		{http.MethodDelete, "n1?token=2", nil},
	} {
		code, _, e := sv.do(t, c.method, gatewaywire.PathFences+c.path, c.body)
		if code != http.StatusInternalServerError || e.Reason != gatewaywire.ReasonGatewayFailed || !strings.Contains(e.Message, "no such table") {
			t.Errorf("%s %s with nft failing: %d %+v; want 500 %s with nft's message", c.method, c.path, code, e, gatewaywire.ReasonGatewayFailed)
		}
	}
}
