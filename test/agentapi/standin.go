package agentapi

import (
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"palisade.dev/palisade/providers/agent/apiclient"
)

// StandIn is the agent's API client of srv, a stand-in API server over TLS
// (httptest.NewTLSServer) that trusts any token: for answers the real API server cannot be made
// to give at will (a watch ended at once, an ERROR event). The CA and the token go to a
// directory of the test's.
func StandIn(t testing.TB, srv *httptest.Server) *apiclient.Client {
	t.Helper()
	dir := t.TempDir()
	ca, token := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	api, err := apiclient.New(srv.URL, token, ca)
	if err != nil {
		t.Fatal(err)
	}
	return api
}
