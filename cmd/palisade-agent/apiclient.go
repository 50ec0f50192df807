package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// apiClient is the few calls the agent makes to the Kubernetes API (CertificateSigningRequests
// and one ConfigMap), over net/http with small typed structs: client-go would cost the agent
// more memory than everything else it does.
type apiClient struct {
	base      string // https://host:port
	tokenFile string // re-read for every request: the kubelet rotates projected tokens
	http      *http.Client
}

func newAPIClient(server, tokenFile, caFile string) (*apiClient, error) {
	if server == "" {
		return nil, errors.New("no API server: set --api-server, or run in a pod ($KUBERNETES_SERVICE_HOST)")
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's CA (--api-ca-file): %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("reading the API server's CA: no PEM certificate in %s", caFile)
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool},
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConns:        1,
		IdleConnTimeout:     90 * time.Second,
	}
	return &apiClient{base: strings.TrimSuffix(server, "/"), tokenFile: tokenFile, http: &http.Client{Transport: tr}}, nil
}

// apiError is the API server's refusal of a request, from its Status object.
type apiError struct {
	op      string
	Code    int
	Reason  string
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s: %d %s: %s", e.op, e.Code, e.Reason, e.Message)
}

func isAPIError(err error, code int) bool {
	var e *apiError
	return errors.As(err, &e) && e.Code == code
}

// do sends one request with the ServiceAccount token and decodes the JSON answer into out
// (unless nil); op names the call in errors.
func (a *apiClient) do(ctx context.Context, op, method, path string, in, out any) error {
	resp, err := a.send(ctx, op, method, path, in)
	if err != nil {
		return err
	}
	defer discard(resp.Body)
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s: decoding the answer: %w", op, err)
	}
	return nil
}

// send returns the response of a successful request, whose body the caller closes; in, when
// not nil, is sent as JSON.
func (a *apiClient) send(ctx context.Context, op, method, path string, in any) (*http.Response, error) {
	if in == nil {
		return a.sendRaw(ctx, op, method, path, nil, "")
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("%s: encoding: %w", op, err)
	}
	return a.sendRaw(ctx, op, method, path, b, "application/json")
}

// sendRaw is send with a body already encoded as contentType (none when body is nil), such as
// a JSON merge patch.
func (a *apiClient) sendRaw(ctx context.Context, op, method, path string, body []byte, contentType string) (*http.Response, error) {
	token, err := os.ReadFile(a.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("%s: reading the ServiceAccount token (--api-token-file): %w", op, err)
	}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer discard(resp.Body)
	var st struct {
		Reason, Message string
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&st)
	if st.Reason == "" {
		st.Reason = http.StatusText(resp.StatusCode)
	}
	return nil, &apiError{op: op, Code: resp.StatusCode, Reason: st.Reason, Message: st.Message}
}

// The fields of a CertificateSigningRequest (certificates.k8s.io/v1) the agent uses.
type csrObject struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       csrSpec    `json:"spec"`
	Status     csrStatus  `json:"status,omitzero"`
}

type objectMeta struct {
	Name            string `json:"name,omitempty"`
	GenerateName    string `json:"generateName,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

type csrSpec struct {
	Request    []byte   `json:"request"` // PEM; base64 in JSON, as the API has it
	SignerName string   `json:"signerName"`
	Usages     []string `json:"usages"`
}

type csrStatus struct {
	Conditions []struct {
		Type, Status, Reason, Message string
	} `json:"conditions,omitempty"`
	Certificate []byte `json:"certificate,omitempty"`
}

const csrPath = "/apis/certificates.k8s.io/v1/certificatesigningrequests"

func (a *apiClient) createCSR(ctx context.Context, csr *csrObject) (*csrObject, error) {
	out := &csrObject{}
	return out, a.do(ctx, "creating a CertificateSigningRequest", http.MethodPost, csrPath, csr, out)
}

func (a *apiClient) getCSR(ctx context.Context, name string) (*csrObject, error) {
	out := &csrObject{}
	return out, a.do(ctx, "getting CertificateSigningRequest "+name, http.MethodGet, csrPath+"/"+url.PathEscape(name), nil, out)
}

// watchCSR watches the CSR name from resourceVersion rv and calls done with every new state
// until it returns true (then watchCSR returns nil), the server ends the watch (nil), or ctx
// ends.
func (a *apiClient) watchCSR(ctx context.Context, name, rv string, done func(*csrObject) bool) error {
	q := url.Values{"watch": {"true"}, "fieldSelector": {"metadata.name=" + name}, "resourceVersion": {rv}, "timeoutSeconds": {"60"}}
	op := "watching CertificateSigningRequest " + name
	resp, err := a.send(ctx, op, http.MethodGet, csrPath+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if ev.Type == "ERROR" { // e.g. 410 Gone: the caller starts again from a GET
			return fmt.Errorf("%s: %s", op, ev.Object)
		}
		csr := &csrObject{}
		if err := json.Unmarshal(ev.Object, csr); err != nil {
			return fmt.Errorf("%s: decoding an event: %w", op, err)
		}
		if done(csr) {
			return nil
		}
	}
}

// getConfigMapKey returns one key of a ConfigMap.
func (a *apiClient) getConfigMapKey(ctx context.Context, namespace, name, key string) (string, error) {
	var cm struct {
		Data map[string]string `json:"data"`
	}
	op := fmt.Sprintf("getting ConfigMap %s/%s", namespace, name)
	if err := a.do(ctx, op, http.MethodGet, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/configmaps/"+url.PathEscape(name), nil, &cm); err != nil {
		return "", err
	}
	v, ok := cm.Data[key]
	if !ok {
		return "", fmt.Errorf("%s: it has no key %s", op, key)
	}
	return v, nil
}
