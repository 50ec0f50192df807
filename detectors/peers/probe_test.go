package peers

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"palisade.dev/palisade/providers/agent/pki"

	"github.com/go-logr/logr"
)

func TestProbeChecksTheNode(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, c *pki.CA, node string) (string, string) {
		pair, err := c.IssueAgent(node)
		crt, key := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		if err == nil {
			err = pair.WriteFiles(crt, key)
		}
		if err != nil {
			t.Fatal(err)
		}
		return crt, key
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := pki.WriteFileAtomic(caFile, ca.CertPEM()); err != nil {
		t.Fatal(err)
	}
	serve := func(crt, key string) string {
		cert, err := pki.KeyPairSource(crt, key, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ListenProbes("127.0.0.1:0", cert.Current, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve()
		t.Cleanup(s.Close)
		return "127.0.0.1:" + strconv.Itoa(s.Port())
	}
	nodeA := serve(write("a", ca, "node-a"))
	foreign := serve(write("x", other, "node-a"))
	plain, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never speaks TLS
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	go func() {
		for {
			c, err := plain.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	pool, err := pki.CAPoolSource(caFile, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	d := NewProbeDialer(pool.Current)
	probe := func(addr, node string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		return d.Probe(ctx, addr, node)
	}
	if err := probe(nodeA, "node-a"); err != nil {
		t.Errorf("probing node-a at its address: %v", err)
	}
	for _, tc := range []struct{ what, addr, node, want string }{
		{"another node at the address", nodeA, "node-b", `is node "node-a", not "node-b"`},
		{"a certificate of another CA", foreign, "node-a", "not an agent certificate of the CA"},
		{"something that is no agent", plain.Addr().String(), "node-a", ""},
		{"nothing listening", "127.0.0.1:1", "node-a", ""},
	} {
		err := probe(tc.addr, tc.node)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.what, err, tc.want)
		}
	}
}
