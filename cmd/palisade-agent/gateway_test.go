package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"palisade.dev/palisade/config/gatewaywire"
	"palisade.dev/palisade/providers/agent/gateway"
	"palisade.dev/palisade/test/testbed/netns"
	"palisade.dev/palisade/test/testbed/storagehost"
)

func TestParseGatewayFlags(t *testing.T) {
	base := []string{"--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--name", "gw"}
	o, err := parseGatewayFlags(base)
	if err != nil {
		t.Fatal(err)
	}
	want := gatewayOptions{listen: ":9446", name: "gw", cert: "c", key: "k", clientCA: "ca", stateDir: DefaultGatewayStateDir,
		nft: "nft", table: gateway.DefaultTable, nftCommand: []string{"nft"}}
	if diff := cmp.Diff(want, o, cmp.AllowUnexported(gatewayOptions{})); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	o, err = parseGatewayFlags(append(base, "--nft", "ip netns exec  gw nft", "--table", "t", "--state-dir", "/s", "--listen-address", "10.0.0.1:1"))
	if err != nil || !cmp.Equal(o.nftCommand, []string{"ip", "netns", "exec", "gw", "nft"}) || o.table != "t" || o.stateDir != "/s" || o.listen != "10.0.0.1:1" {
		t.Errorf("parseGatewayFlags = %+v, %v", o, err)
	}
	if hostname, _ := os.Hostname(); hostname != "" {
		if o, err := parseGatewayFlags(base[:6]); err != nil || o.name != hostname {
			t.Errorf("--name defaults to %q, want the host name %q (%v)", o.name, hostname, err)
		}
	}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"nothing", nil, []string{"--tls-cert is required", "--tls-key is required", "--client-ca is required: the CA the controller's client certificate chains to"}},
		{"no state dir", append(base, "--state-dir", ""), []string{"--state-dir is required: fences and fencing tokens must outlive the gateway"}},
		{"blank nft", append(base, "--nft", "  "), []string{"--nft is required"}},
		{"arguments", append(base, "extra"), []string{`unexpected arguments ["extra"]`}},
		{"unknown flag", append(base, "--controller-address", "x"), []string{"flag provided but not defined: -controller-address"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseGatewayFlags(c.args)
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("parseGatewayFlags(%q) = %v; want an error saying %q", c.args, err, w)
				}
			}
		})
	}
}

// TestGatewayCommand runs `palisade-agent gateway` in a storage host's network namespace: it
// serves the controller's fences over mutual TLS, keeps them in place when stopped, and a
// restarted gateway puts a fence lost with the ruleset (a rebooted storage host) back.
func TestGatewayCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("network namespaces and nftables need root: run the tests as root (make test does)")
	}
	lan := netns.New(t)
	storage := storagehost.Start(t, lan, "storage")
	n1 := lan.AddNode("n1")
	dir := t.TempDir()
	certs := storagehost.WriteCerts(t, dir, storage.IP())
	client := certs.HTTPClient(t, certs.Client)
	url := "https://" + storage.IP() + ":9446" + gatewaywire.PathFences + "n1"
	args := []string{"gateway", "--listen-address", storage.IP() + ":9446", "--name", "gw-1", "--tls-cert", certs.CertFile,
		"--tls-key", certs.KeyFile, "--client-ca", certs.CAFile, "--state-dir", filepath.Join(dir, "state")}

	p := startIn(t, storage.Node(), args)
	p.waitForLog(t, "serving fence commands", 10*time.Second)
	body, _ := json.Marshal(gatewaywire.FenceRequest{Token: 5, Addresses: []string{n1.IP()}})
	fenced := gatewaywire.Fence{Gateway: "gw-1", Node: "n1", Token: 5, Fenced: true, Rejected: []string{n1.IP()}}
	if got := command(t, client, http.MethodPut, url, body); !cmp.Equal(got, fenced) {
		t.Fatalf("PUT = %+v, want %+v", got, fenced)
	}
	if storage.Served(t, n1) {
		t.Error("node n1 reaches the storage service after its fence")
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("gateway exited %d on SIGTERM:\n%s", code, p.logs())
	}
	if storage.Served(t, n1) {
		t.Error("node n1 reaches the storage service once the gateway stopped: its fences must stay")
	}

	// The storage host reboots: its ruleset is gone; the gateway puts the fence back.
	storage.RunNFT(t, "delete", "table", "inet", gateway.DefaultTable)
	if !storage.Served(t, n1) {
		t.Fatal("node n1 does not reach the storage service with the table deleted: the reboot scene proves nothing")
	}
	p = startIn(t, storage.Node(), args)
	p.waitForLog(t, "serving fence commands", 10*time.Second)
	if storage.Served(t, n1) {
		t.Error("node n1 reaches the storage service after the gateway's restart")
	}
	if got := command(t, client, http.MethodGet, url, nil); !cmp.Equal(got, fenced) {
		t.Errorf("GET after the restart = %+v, want %+v", got, fenced)
	}
	if got := command(t, client, http.MethodDelete, url+"?token=6", nil); got.Fenced || got.Token != 6 || !storage.Served(t, n1) {
		t.Errorf("DELETE token 6 = %+v; want unfenced, node n1 served", got)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("gateway exited %d on SIGTERM", code)
	}
	if strings.Contains(p.logs(), `"level":"error"`) {
		t.Errorf("gateway logged errors:\n%s", p.logs())
	}
}

// startIn runs palisade-agent with args in n's namespace.
func startIn(t *testing.T, n *netns.Node, args []string) *proc {
	t.Helper()
	return startProc(t, n.Command(context.Background(), agentBin, args...), "gateway")
}

// command sends a command and decodes its 200 answer.
func command(t *testing.T, c *http.Client, method, url string, body []byte) gatewaywire.Fence {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var f gatewaywire.Fence
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &f) != nil {
		t.Fatalf("%s %s: %s %s", method, url, resp.Status, raw)
	}
	return f
}
