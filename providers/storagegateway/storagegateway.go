// Package storagegateway is the controller's side of the StorageGateway method: each of the
// method's storage gateways (palisade-agent gateway, on a storage host) is asked, over HTTPS
// with mutual TLS (config/gatewaywire), to reject every packet from the node's addresses under
// the fence's token, and the fence counts only when every gateway reads its ruleset back with
// the node's addresses rejected. The lift (Unfence) carries a newer token, so that a gateway
// refuses a late or replayed fence command afterwards.
package storagegateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"palisade.dev/palisade/config/gatewaywire"
	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/networkfence"
)

const (
	// ProviderName is the provider's name in metrics and records.
	ProviderName = "storagegateway"
	// Secret keys of the method's tlsSecretRef.
	KeyCA   = "ca.crt"
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
	// callTimeout bounds one call to one gateway.
	callTimeout = 5 * time.Second
	recheck     = time.Second
)

var (
	_ providers.Fencer   = (*Provider)(nil)
	_ providers.Unfencer = (*Provider)(nil)
)

var hints = map[providers.Reason]string{
	providers.ReasonBadTarget:           "Fix what the message names (the method's gateways or tlsSecretRef, the node's addresses or its palisade.dev/storage-cidrs), then delete this NodeFence to try again.",
	providers.ReasonGatewayUnreachable:  "Check that palisade-agent gateway runs on the storage host and that the controller reaches its address.",
	providers.ReasonStorageRefused:      "The gateway could not apply or read its nftables ruleset: see its log.",
	providers.ReasonStaleToken:          "The gateway already took a newer fencing token for this node, from a later fence or lift: this command changed nothing.",
	providers.ReasonStorageFenceRemoved: "A later command lifted this fence at the gateway: the storage may serve the node again. The chain's next method fences the node.",
}

// Provider is the StorageGateway Fencer. It is safe for concurrent use.
type Provider struct {
	// reader reads Nodes and the method's Secret.
	reader client.Reader
}

// New returns a StorageGateway provider reading Nodes and Secrets through reader.
func New(reader client.Reader) *Provider { return &Provider{reader: reader} }

// Name is "storagegateway".
func (p *Provider) Name() string { return ProviderName }

// Fence asks every gateway to reject the node's addresses under the fence's token.
func (p *Provider) Fence(ctx context.Context, req providers.Request) (providers.Status, error) {
	gws, hc, err := p.gateways(ctx, req)
	if err != nil {
		return failure(err)
	}
	addrs, err := p.addresses(ctx, req.Node())
	if err != nil {
		return failure(err)
	}
	token := req.Fence.Status.Token
	body := gatewaywire.FenceRequest{Token: token, Addresses: addrs}
	for _, gw := range gws {
		if _, err := call(ctx, hc, http.MethodPut, fenceURL(gw, req.Node(), ""), body); err != nil {
			return failure(fmt.Errorf("gateway %s: %w", gw, err))
		}
	}
	return providers.Status{State: providers.InProgress, Message: fmt.Sprintf("storage gateways %s asked to reject %s under fencing token %d",
		strings.Join(gws, ", "), strings.Join(addrs, ", "), token)}, nil
}

// Check reads every gateway's ruleset back: Confirmed once each rejects all the node's
// addresses under the fence's token (or a later fence's).
func (p *Provider) Check(ctx context.Context, req providers.Request) (providers.Status, error) {
	gws, hc, err := p.gateways(ctx, req)
	if err != nil {
		return failure(err)
	}
	token := req.Fence.Status.Token
	var seen []string
	for _, gw := range gws {
		f, err := call(ctx, hc, http.MethodGet, fenceURL(gw, req.Node(), ""), nil)
		if err != nil {
			return failure(fmt.Errorf("gateway %s: %w", gw, err))
		}
		switch {
		case f.Token > token && !f.Fenced:
			return providers.Status{State: providers.Failed, Reason: providers.ReasonStorageFenceRemoved,
				Message: fmt.Sprintf("gateway %s took token %d after this fence's %d and no longer rejects node %s. %s", gw, f.Token, token, req.Node(), hints[providers.ReasonStorageFenceRemoved])}, nil
		case f.Token < token || !f.Fenced:
			return providers.Status{State: providers.InProgress, RetryAfter: recheck,
				Message: fmt.Sprintf("gateway %s does not read the fence of node %s back yet (token %d, fenced %t, rejecting %v)", gw, req.Node(), f.Token, f.Fenced, f.Rejected)}, nil
		}
		seen = append(seen, fmt.Sprintf("%s rejects %s under token %d", gw, strings.Join(f.Rejected, ", "), f.Token))
	}
	return providers.Status{State: providers.Confirmed, Message: "storage gateways read back: " + strings.Join(seen, "; ")}, nil
}

// End has nothing to drop: the gateways keep the fence until Unfence.
func (p *Provider) End(context.Context, providers.Request) error { return nil }

// Unfence asks every gateway to lift the node's fence under the lift's token, and reads it
// back lifted. A gateway that already took a newer token (a later fence of the node) holds
// nothing of this fence any more.
func (p *Provider) Unfence(ctx context.Context, req providers.Request) (providers.Status, error) {
	if req.LiftToken <= req.Fence.Status.Token {
		return providers.Status{}, fmt.Errorf("lifting a storage gateway fence needs a fencing token newer than the fence's %d (got %d)", req.Fence.Status.Token, req.LiftToken)
	}
	gws, hc, err := p.gateways(ctx, req)
	if err != nil {
		return providers.Status{}, err
	}
	var done []string
	for _, gw := range gws {
		f, err := call(ctx, hc, http.MethodDelete, fenceURL(gw, req.Node(), strconv.FormatInt(req.LiftToken, 10)), nil)
		var stale *wireError
		switch {
		case errors.As(err, &stale) && stale.Body.Reason == gatewaywire.ReasonStaleToken:
			done = append(done, fmt.Sprintf("%s already took a later token", gw))
			continue
		case err != nil:
			return providers.Status{}, fmt.Errorf("gateway %s: %w", gw, err)
		case f.Fenced || len(f.Rejected) > 0:
			return providers.Status{State: providers.InProgress, RetryAfter: recheck,
				Message: fmt.Sprintf("gateway %s still rejects %v for node %s", gw, f.Rejected, req.Node())}, nil
		}
		done = append(done, fmt.Sprintf("%s lifted (token %d)", gw, f.Token))
	}
	return providers.Status{State: providers.Confirmed, Message: "storage gateways: " + strings.Join(done, "; ")}, nil
}

// gateways returns the method's gateways and an HTTPS client with its mutual TLS.
func (p *Provider) gateways(ctx context.Context, req providers.Request) ([]string, *http.Client, error) {
	s := req.Method.StorageGateway
	if s == nil || len(s.Gateways) == 0 {
		return nil, nil, badTarget("method %s has no storageGateway.gateways", req.Method.Name)
	}
	for _, gw := range s.Gateways {
		if _, _, err := net.SplitHostPort(gw); err != nil {
			return nil, nil, badTarget("method %s: gateway %q is not host:port", req.Method.Name, gw)
		}
	}
	ref := s.TLSSecretRef
	secret := &corev1.Secret{}
	if err := p.reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, badTarget("Secret %s/%s (method %s's tlsSecretRef) does not exist", ref.Namespace, ref.Name, req.Method.Name)
		}
		return nil, nil, providers.NewError(providers.ReasonAPIError, fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(secret.Data[KeyCA]) {
		return nil, nil, badTarget("Secret %s/%s has no PEM certificate under key %s", ref.Namespace, ref.Name, KeyCA)
	}
	cert, err := tls.X509KeyPair(secret.Data[KeyCert], secret.Data[KeyKey])
	if err != nil {
		return nil, nil, badTarget("Secret %s/%s: keys %s and %s are not a certificate and its key", ref.Namespace, ref.Name, KeyCert, KeyKey)
	}
	hc := &http.Client{Timeout: callTimeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		DialContext:     (&net.Dialer{Timeout: callTimeout / 2}).DialContext, DisableKeepAlives: true,
	}}
	return slices.Clone(s.Gateways), hc, nil
}

// addresses are the node's storage-fence CIDRs as addresses: a gateway fences addresses, not
// networks.
func (p *Provider) addresses(ctx context.Context, node string) ([]string, error) {
	cidrs, err := networkfence.StorageCIDRs(ctx, p.reader, node)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(cidrs))
	for _, c := range cidrs {
		pfx, err := netip.ParsePrefix(c)
		if err != nil || !pfx.IsSingleIP() {
			return nil, badTarget("node %s: a storage gateway fences addresses, and %s is a network: list the node's addresses (/32, /128) in %s", node, c, v1alpha1.AnnotationStorageCIDRs)
		}
		out = append(out, pfx.Addr().String())
	}
	return out, nil
}

func fenceURL(gw, node, token string) string {
	u := url.URL{Scheme: "https", Host: gw, Path: gatewaywire.PathFences + node}
	if token != "" {
		u.RawQuery = url.Values{"token": {token}}.Encode()
	}
	return u.String()
}

// wireError is a gateway's answer other than 200.
type wireError struct {
	Status int
	Body   gatewaywire.Error
}

func (e *wireError) Error() string {
	return fmt.Sprintf("answered %d %s: %s", e.Status, e.Body.Reason, e.Body.Message)
}

// call makes one request and decodes the gateway's read-back; its errors carry a Reason.
func call(ctx context.Context, hc *http.Client, method, u string, body any) (gatewaywire.Fence, error) {
	var f gatewaywire.Fence
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return f, err
		}
		rd = bytes.NewReader(b)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return f, badTarget("%v", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(hreq)
	if err != nil {
		var unknownCA x509.UnknownAuthorityError
		var hostname x509.HostnameError
		if errors.As(err, &unknownCA) || errors.As(err, &hostname) {
			return f, badTarget("the gateway's certificate is not trusted (%v): its CA must be %s of the method's Secret", err, KeyCA)
		}
		return f, providers.NewError(providers.ReasonGatewayUnreachable, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return f, providers.NewError(providers.ReasonGatewayUnreachable, err)
	}
	if resp.StatusCode != http.StatusOK {
		we := &wireError{Status: resp.StatusCode}
		if json.Unmarshal(raw, &we.Body) != nil || we.Body.Reason == "" {
			we.Body = gatewaywire.Error{Reason: gatewaywire.ReasonGatewayFailed, Message: strings.TrimSpace(string(raw))}
		}
		switch we.Body.Reason {
		case gatewaywire.ReasonStaleToken:
			return f, providers.NewError(providers.ReasonStaleToken, we)
		case gatewaywire.ReasonBadRequest:
			return f, providers.NewError(providers.ReasonBadTarget, we)
		}
		return f, providers.NewError(providers.ReasonStorageRefused, we)
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return f, providers.NewError(providers.ReasonStorageRefused, fmt.Errorf("unreadable answer: %w", err))
	}
	return f, nil
}

// failure turns an error that trying again cannot cure (BadTarget, StaleToken) into a Failed
// status that says what to do, and passes any other error on.
func failure(err error) (providers.Status, error) {
	r := providers.ReasonOf(err)
	if providers.IsRetryable(err) && r != providers.ReasonStaleToken {
		return providers.Status{}, providers.WithHint(err, hints[r])
	}
	return providers.Status{State: providers.Failed, Reason: r, Message: fmt.Sprintf("%v. %s", err, hints[r])}, nil
}

func badTarget(format string, args ...any) error {
	return providers.NewError(providers.ReasonBadTarget, fmt.Errorf(format, args...))
}
