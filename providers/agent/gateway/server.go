package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"palisade.dev/palisade/config/gatewaywire"
	"palisade.dev/palisade/providers/agent/pki"
)

// maxBodyBytes bounds a FenceRequest: a node has a handful of addresses.
const maxBodyBytes = 64 << 10

// commandTimeout bounds one command's nft runs. A command is carried out to the end even when
// its client stops waiting: nft applies a ruleset in one transaction, but a fence recorded on
// disk and not yet applied would wait for the next command to take effect.
const commandTimeout = 30 * time.Second

// handler serves gatewaywire's protocol for one Gateway.
type handler struct {
	g    *Gateway
	name string
	log  logr.Logger
}

// NewHandler serves gatewaywire's protocol: PUT, GET and DELETE on gatewaywire.PathFences +
// node name. Every 200 answer is the node's fence read back from nftables (Gateway.Check),
// never the request echoed. name is the gateway's name, sent in every answer.
func NewHandler(g *Gateway, name string, log logr.Logger) http.Handler {
	h := &handler{g: g, name: name, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc(gatewaywire.PathFences, h.serve)
	return mux
}

// requestError is an answer other than 200: its status and body.
type requestError struct {
	status int
	reason string
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, reason: gatewaywire.ReasonBadRequest, msg: fmt.Sprintf(format, args...)}
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request) {
	node := strings.TrimPrefix(r.URL.Path, gatewaywire.PathFences)
	log := h.log.WithValues("Node", klog.KRef("", node), "method", r.Method, "client", clientName(r))
	var (
		fence gatewaywire.Fence
		err   error
	)
	if errs := validation.IsDNS1123Subdomain(node); len(errs) > 0 {
		err = badRequest("node name %q in path %s is not a node name (a DNS-1123 subdomain): %s", node, r.URL.Path, strings.Join(errs, "; "))
	} else {
		switch r.Method {
		case http.MethodPut:
			fence, err = h.fence(r, node, &log)
		case http.MethodDelete:
			fence, err = h.unfence(r, node, &log)
		case http.MethodGet:
			fence, err = h.check(r.Context(), node)
		default:
			w.Header().Set("Allow", "GET, PUT, DELETE")
			err = &requestError{status: http.StatusMethodNotAllowed, reason: gatewaywire.ReasonBadRequest, msg: r.Method + " is not a gateway command: PUT fences, DELETE unfences, GET reads back"}
		}
	}
	if err != nil {
		h.fail(w, err, log)
		return
	}
	if r.Method != http.MethodGet {
		log.Info("command carried out", "fenced", fence.Fenced, "rejected", fence.Rejected, "highestFencingToken", fence.Token)
	}
	write(w, http.StatusOK, fence)
}

// fence carries out a PUT; it adds the command to log once read.
func (h *handler) fence(r *http.Request, node string, log *logr.Logger) (gatewaywire.Fence, error) {
	var req gatewaywire.FenceRequest
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBodyBytes)).Decode(&req); err != nil {
		return gatewaywire.Fence{}, badRequest("reading the fence request of node %s: %v", node, err)
	}
	if req.Token < 1 {
		return gatewaywire.Fence{}, badRequest("fence of node %s: fencing token %d: a fencing token is positive", node, req.Token)
	}
	*log = log.WithValues("fencingToken", req.Token, "addresses", req.Addresses)
	addrs, err := parseAddrs(req.Addresses)
	if err != nil {
		return gatewaywire.Fence{}, badRequest("fence of node %s: %v", node, err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), commandTimeout)
	defer cancel()
	if err := h.g.Fence(ctx, node, req.Token, addrs); err != nil {
		return gatewaywire.Fence{}, err
	}
	return h.check(ctx, node)
}

// unfence carries out a DELETE. Its token must be newer than the fence it lifts (see
// gatewaywire): were it equal, a replay of that fence would put it back. It adds the command to
// log once read.
func (h *handler) unfence(r *http.Request, node string, log *logr.Logger) (gatewaywire.Fence, error) {
	raw := r.URL.Query().Get("token")
	if raw == "" {
		return gatewaywire.Fence{}, badRequest("unfence of node %s: no fencing token: DELETE %s%s?token=N, N newer than the fence's", node, gatewaywire.PathFences, node)
	}
	token, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || token < 1 {
		return gatewaywire.Fence{}, badRequest("unfence of node %s: fencing token %q is not a positive integer", node, raw)
	}
	*log = log.WithValues("fencingToken", token)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), commandTimeout)
	defer cancel()
	if st, err := h.g.Check(ctx, node); err == nil && (st.Fenced || len(st.Rejected) > 0) && token == st.Token {
		return gatewaywire.Fence{}, &requestError{status: http.StatusConflict, reason: gatewaywire.ReasonStaleToken,
			msg: fmt.Sprintf("refused: unfence of node %s carries fencing token %d, the token of the fence it would lift; an unfence needs a newer token, or a replay of the fence would put it back", node, token)}
	}
	if err := h.g.Unfence(ctx, node, token); err != nil {
		return gatewaywire.Fence{}, err
	}
	return h.check(ctx, node)
}

// check reads node's fence back.
func (h *handler) check(ctx context.Context, node string) (gatewaywire.Fence, error) {
	st, err := h.g.Check(ctx, node)
	if err != nil {
		return gatewaywire.Fence{}, err
	}
	f := gatewaywire.Fence{Gateway: h.name, Node: node, Token: st.Token, Fenced: st.Fenced}
	for _, a := range st.Rejected {
		f.Rejected = append(f.Rejected, a.String())
	}
	return f, nil
}

// parseAddrs parses a fence's addresses: IP addresses of a node as the storage host sees its
// packets, at least one.
func parseAddrs(raw []string) ([]netip.Addr, error) {
	if len(raw) == 0 {
		return nil, errors.New("no address to fence: a fence names at least one IP address of the node")
	}
	addrs := make([]netip.Addr, 0, len(raw))
	for _, s := range raw {
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil && strings.Contains(s, "/"):
			return nil, fmt.Errorf("address %q is a prefix: a fence names single IP addresses, the node's own", s)
		case err != nil:
			return nil, fmt.Errorf("address %q is not an IP address: %v", s, err)
		case a.Zone() != "":
			return nil, fmt.Errorf("address %q has a zone: nftables matches addresses without one", s)
		case a.Is4In6():
			return nil, fmt.Errorf("address %q is an IPv4-mapped IPv6 address: send the IPv4 address %s, which the node's packets carry", s, a.Unmap())
		case a.IsUnspecified(), a.IsLoopback(), a.IsMulticast():
			return nil, fmt.Errorf("address %q is not a node's address (unspecified, loopback or multicast)", s)
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// fail answers err: a requestError as it says, a StaleTokenError 409, anything else (nft or
// the state file failed) 500.
func (h *handler) fail(w http.ResponseWriter, err error, log logr.Logger) {
	var re *requestError
	var stale *StaleTokenError
	switch {
	case errors.As(err, &re):
	case errors.As(err, &stale):
		re = &requestError{status: http.StatusConflict, reason: gatewaywire.ReasonStaleToken, msg: stale.Error()}
	default:
		msg := err.Error()
		// Check runs nft for its output: nft's own message is in the ExitError.
		if exit := (*exec.ExitError)(nil); errors.As(err, &exit) && len(exit.Stderr) > 0 {
			msg += ": " + string(bytes.TrimSpace(exit.Stderr))
		}
		re = &requestError{status: http.StatusInternalServerError, reason: gatewaywire.ReasonGatewayFailed, msg: msg}
	}
	if re.status == http.StatusInternalServerError {
		log.Error(err, "command failed")
	} else {
		log.Info("command refused", "reason", re.reason, "message", re.msg)
	}
	write(w, re.status, gatewaywire.Error{Reason: re.reason, Message: re.msg})
}

func write(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// clientName is the CommonName of the verified client certificate, for the log.
func clientName(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return ""
	}
	return r.TLS.VerifiedChains[0][0].Subject.CommonName
}

// ServerTLSConfig is the gateway's TLS: mutual, TLS 1.2 or later, every client certificate
// verified against the CA bundle in clientCAFile. The three files are re-read when they change
// (pki.FileSource), so a rotated certificate applies to the next connection; unusable files fail
// now.
func ServerTLSConfig(certFile, keyFile, clientCAFile string, log logr.Logger) (*tls.Config, error) {
	cert, err := pki.KeyPairSource(certFile, keyFile, log)
	if err != nil {
		return nil, fmt.Errorf("loading the gateway's certificate: %w", err)
	}
	pool, err := pki.CAPoolSource(clientCAFile, log)
	if err != nil {
		return nil, fmt.Errorf("loading the CA of the gateway's clients: %w", err)
	}
	return pki.ServerTLSConfig(tls.VersionTLS12, cert, pool), nil
}
