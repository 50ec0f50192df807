package apiclient

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

// Client makes the few calls the agent makes to the Kubernetes API (CertificateSigningRequests,
// one ConfigMap, its NodeFence, its node's pods), over net/http with small typed structs:
// client-go would cost the agent more memory than everything else it does.
type Client struct {
	base      string // https://host:port
	tokenFile string // re-read for every request: the kubelet rotates projected tokens
	http      *http.Client
}

// New returns a client of the API server at server (https://host:port) that authenticates with
// the token in tokenFile and trusts the CA bundle in caFile.
func New(server, tokenFile, caFile string) (*Client, error) {
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
	return &Client{base: strings.TrimSuffix(server, "/"), tokenFile: tokenFile, http: &http.Client{Transport: tr}}, nil
}

// Error is the API server's refusal of a request, from its Status object.
type Error struct {
	op      string
	Code    int
	Reason  string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %d %s: %s", e.op, e.Code, e.Reason, e.Message)
}

// IsStatus says whether err is the API server's refusal with HTTP status code.
func IsStatus(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Do sends one request with the ServiceAccount token and decodes the JSON answer into out
// (unless nil); op names the call in errors.
func (a *Client) Do(ctx context.Context, op, method, path string, in, out any) error {
	resp, err := a.Send(ctx, op, method, path, in)
	if err != nil {
		return err
	}
	defer Drain(resp.Body)
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s: decoding the answer: %w", op, err)
	}
	return nil
}

// Send returns the response of a successful request, whose body the caller closes; in, when
// not nil, is sent as JSON.
func (a *Client) Send(ctx context.Context, op, method, path string, in any) (*http.Response, error) {
	if in == nil {
		return a.SendRaw(ctx, op, method, path, nil, "")
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("%s: encoding: %w", op, err)
	}
	return a.SendRaw(ctx, op, method, path, b, "application/json")
}

// SendRaw is Send with a body already encoded as contentType (none when body is nil), such as
// a JSON merge patch.
func (a *Client) SendRaw(ctx context.Context, op, method, path string, body []byte, contentType string) (*http.Response, error) {
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
	defer Drain(resp.Body)
	var st struct {
		Reason, Message string
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&st)
	if st.Reason == "" {
		st.Reason = http.StatusText(resp.StatusCode)
	}
	return nil, &Error{op: op, Code: resp.StatusCode, Reason: st.Reason, Message: st.Message}
}

// CSR holds the fields of a CertificateSigningRequest (certificates.k8s.io/v1) the agent uses.
type CSR struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       CSRSpec    `json:"spec"`
	Status     CSRStatus  `json:"status,omitzero"`
}

// ObjectMeta is the metadata the agent reads and writes.
type ObjectMeta struct {
	Name            string `json:"name,omitempty"`
	GenerateName    string `json:"generateName,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// CSRSpec is a CertificateSigningRequest's spec.
type CSRSpec struct {
	Request    []byte   `json:"request"` // PEM; base64 in JSON, as the API has it
	SignerName string   `json:"signerName"`
	Usages     []string `json:"usages"`
}

// CSRStatus is a CertificateSigningRequest's status.
type CSRStatus struct {
	Conditions []struct {
		Type, Status, Reason, Message string
	} `json:"conditions,omitempty"`
	Certificate []byte `json:"certificate,omitempty"`
}

const csrPath = "/apis/certificates.k8s.io/v1/certificatesigningrequests"

// CreateCSR creates csr and returns it as created.
func (a *Client) CreateCSR(ctx context.Context, csr *CSR) (*CSR, error) {
	out := &CSR{}
	return out, a.Do(ctx, "creating a CertificateSigningRequest", http.MethodPost, csrPath, csr, out)
}

// GetCSR reads the CSR name.
func (a *Client) GetCSR(ctx context.Context, name string) (*CSR, error) {
	out := &CSR{}
	return out, a.Do(ctx, "getting CertificateSigningRequest "+name, http.MethodGet, csrPath+"/"+url.PathEscape(name), nil, out)
}

// WatchCSR watches the CSR name from resourceVersion rv and calls done with every new state
// until it returns true (then watchCSR returns nil), the server ends the watch (nil), or ctx
// ends.
func (a *Client) WatchCSR(ctx context.Context, name, rv string, done func(*CSR) bool) error {
	q := url.Values{"fieldSelector": {"metadata.name=" + name}, "resourceVersion": {rv}, "timeoutSeconds": {"60"}}
	errDone := errors.New("done")
	err := Watch(ctx, a, "watching CertificateSigningRequest "+name, csrPath, q, func(ev Event[*CSR]) error {
		if done(ev.Object) {
			return errDone
		}
		return nil
	})
	if errors.Is(err, errDone) {
		return nil
	}
	return err // e.g. 410 Gone: the caller starts again from a GET
}

// ConfigMapKey returns one key of a ConfigMap.
func (a *Client) ConfigMapKey(ctx context.Context, namespace, name, key string) (string, error) {
	var cm struct {
		Data map[string]string `json:"data"`
	}
	op := fmt.Sprintf("getting ConfigMap %s/%s", namespace, name)
	if err := a.Do(ctx, op, http.MethodGet, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/configmaps/"+url.PathEscape(name), nil, &cm); err != nil {
		return "", err
	}
	v, ok := cm.Data[key]
	if !ok {
		return "", fmt.Errorf("%s: it has no key %s", op, key)
	}
	return v, nil
}

// SetServerName has the client check the API server's certificate for name instead of the
// host of its URL (e.g. behind a relay).
func (a *Client) SetServerName(name string) {
	a.http.Transport.(*http.Transport).TLSClientConfig.ServerName = name
}

// Drain drains a response body, so that its connection can be reused, and closes it.
func Drain(r io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r, 4096))
	_ = r.Close()
}
