package channel

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"palisade.dev/palisade/config/agentwire"
	"palisade.dev/palisade/providers/agent/pki"

	"github.com/go-logr/logr"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// Address is the controller's heartbeat server, host:port.
	Address string
	// ServerName is the name the server's certificate must carry; default: Address's host.
	ServerName string
	// CertFile and KeyFile hold the agent's client certificate; they are re-read on change.
	CertFile, KeyFile string
	// CAFile holds the CA bundle the server's certificate must chain to, read once.
	CAFile string
	// Timeout bounds one heartbeat; default 5s.
	Timeout time.Duration
	// Logger defaults to a discarding logger.
	Logger logr.Logger
	// NoDatagrams sends every heartbeat over HTTPS (see agentwire's "Heartbeat datagrams").
	NoDatagrams bool
	// Dial opens the TCP connection to Address; default a net.Dialer's (tests dial from a
	// network namespace).
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Client sends an agent's heartbeats to the controller: as authenticated datagrams once the
// controller gave it a key, else, and whenever the controller asks for it or datagrams go
// unanswered, over mutually authenticated TLS (HTTP/1.1 with keep-alive).
type Client struct {
	dg           *clientDatagrams // nil with NoDatagrams
	url          string
	cert         *pki.FileSource[*tls.Certificate]
	timeout      time.Duration
	newTransport func() *http.Transport

	mu        sync.Mutex
	transport *http.Transport // its connections were opened with certificate generation gen
	gen       uint64
}

// NewClient loads the certificate files, failing early when they are unusable.
func NewClient(opts ClientOptions) (*Client, error) {
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.ServerName == "" {
		host, _, err := net.SplitHostPort(opts.Address)
		if err != nil {
			return nil, fmt.Errorf("parsing the controller address %q: %w", opts.Address, err)
		}
		opts.ServerName = host
	}
	cert, err := pki.KeyPairSource(opts.CertFile, opts.KeyFile, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("loading the agent certificate: %w", err)
	}
	pool, err := pki.CAPoolSource(opts.CAFile, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("loading the controller CA: %w", err)
	}
	roots, _, _ := pool.Get()
	c := &Client{url: "https://" + opts.Address + agentwire.HeartbeatPath, cert: cert, timeout: opts.Timeout}
	dial := opts.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	c.newTransport = func() *http.Transport {
		return &http.Transport{
			DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
				conn, err := dial(ctx, network, address)
				if err != nil {
					return nil, err
				}
				abortOnClose(conn)
				return conn, nil
			},
			TLSClientConfig: &tls.Config{
				MinVersion: tls.VersionTLS13,
				RootCAs:    roots,
				ServerName: opts.ServerName,
				GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
					cert, _, err := c.cert.Get()
					return cert, err
				},
			},
			TLSHandshakeTimeout: opts.Timeout,
			IdleConnTimeout:     time.Minute,
		}
	}
	c.transport = c.newTransport()
	_, c.gen, _ = cert.Get()
	if !opts.NoDatagrams {
		c.dg = &clientDatagrams{address: opts.Address, timeout: opts.Timeout, log: opts.Logger}
	}
	return c, nil
}

// abortOnClose makes closing conn abort it (a reset, SO_LINGER 0) instead of ending it in
// order, which discards what it has not yet delivered. The transport closes a connection when
// a heartbeat's time runs out; ended in order, the kernel would keep retransmitting the
// request the network dropped, after the agent gave up on it, and deliver it once the network
// heals: the node's state from before, arriving as news. The controller ignores such a
// heartbeat when a newer one of the agent came first (its Seq), not when it comes first. This
// holds for HTTP/1.1, which the transport speaks (a TLSClientConfig and a DialContext of its
// own, no ForceAttemptHTTP2): a request given up on closes its connection. Over HTTP/2 it would
// reset the stream and keep the connection, and the request with it.
func abortOnClose(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}

// httpClient returns the client of the current transport. When the certificate files changed
// since the last heartbeat, or renew is set, it first replaces the transport, so that the
// heartbeat opens a new connection whose handshake presents the current certificate. (Closing
// the idle connections would not do: a connection whose last response is still being read
// returns to the pool after the call, and would be reused.) The old transport's connections
// close once idle.
func (c *Client) httpClient(renew bool) *http.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, gen, err := c.cert.Get(); err == nil && gen != c.gen {
		c.gen, renew = gen, true
	}
	if renew {
		old := c.transport
		c.transport = c.newTransport()
		old.CloseIdleConnections()
		time.AfterFunc(c.timeout, old.CloseIdleConnections) // once its last stream has ended
	}
	return &http.Client{Transport: c.transport, Timeout: c.timeout}
}

// certRenewed says whether the certificate files changed since the connection's handshake.
func (c *Client) certRenewed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, gen, err := c.cert.Get()
	return err == nil && gen != c.gen
}

// Identity is the node name in the current client certificate.
func (c *Client) Identity() (string, error) {
	cert, _, err := c.cert.Get()
	if err != nil {
		return "", err
	}
	return cert.Leaf.Subject.CommonName, nil
}

// Send posts one heartbeat and returns the command the controller answered with, nil when it
// has none for this node (see Exchange).
func (c *Client) Send(ctx context.Context, rep agentwire.Report) (*agentwire.Command, error) {
	resp, err := c.Exchange(ctx, rep)
	return resp.Command, err
}

// Exchange sends one heartbeat and returns the controller's answer: the node's pending command,
// the peers to probe (the ones last received when the controller has no new ones) and the
// interval it asks for. It sends a datagram when it holds a key, and posts over HTTPS when it
// holds none, when the Report does not fit a datagram, when the controller's answer asks for
// an exchange, or when no answer came in half of ctx's time.
func (c *Client) Exchange(ctx context.Context, rep agentwire.Report) (agentwire.Response, error) {
	if c.dg == nil {
		return c.post(ctx, rep)
	}
	rep.Datagrams = true
	// A renewed certificate goes over HTTPS at once: its handshake gets a key bound to it.
	if resp, ok := c.dg.heartbeat(ctx, &rep, c.certRenewed()); ok {
		return resp, nil
	}
	resp, err := c.post(ctx, rep)
	if err == nil {
		c.dg.answered(resp)
	}
	if c.dg.flowing() {
		// Heartbeats go as datagrams: the connection would sit idle in the controller's memory
		// (buffers, TLS state, a goroutine) until the next news, which is rare.
		c.closeIdle()
	}
	return resp, err
}

// post posts one heartbeat over HTTPS and returns the controller's answer (empty on 204). When
// the certificate files changed since the last heartbeat, it opens a new connection, so that
// its handshake presents the renewed certificate.
func (c *Client) post(ctx context.Context, rep agentwire.Report) (agentwire.Response, error) {
	body, err := json.Marshal(rep)
	if err != nil {
		return agentwire.Response{}, fmt.Errorf("encoding heartbeat: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return agentwire.Response{}, fmt.Errorf("building heartbeat request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.httpClient(false).Do(req)
	if err != nil {
		return agentwire.Response{}, fmt.Errorf("sending heartbeat: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return agentwire.Response{}, nil
	case http.StatusOK:
		return decodeResponse(resp.Body)
	case http.StatusUnauthorized:
		c.httpClient(true) // the next heartbeat on a new connection, with the current certificate
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return agentwire.Response{}, &RejectedError{Code: resp.StatusCode, Message: string(bytes.TrimSpace(msg))}
}

// decodeResponse reads a 200 response: the heartbeat was accepted, with a command or peers.
func decodeResponse(body io.Reader) (agentwire.Response, error) {
	var r agentwire.Response
	if err := json.NewDecoder(io.LimitReader(body, agentwire.MaxBodyBytes)).Decode(&r); err != nil {
		return agentwire.Response{}, fmt.Errorf("heartbeat accepted, but reading the controller's answer: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 4096)) // so that the connection is reused
	return r, nil
}

// Close closes the idle connection and the datagram socket.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.transport.CloseIdleConnections()
	if c.dg != nil {
		c.dg.close()
	}
}

// closeIdle closes the idle HTTPS connection.
func (c *Client) closeIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.transport.CloseIdleConnections()
}

// RejectedError is the server's refusal of a heartbeat.
type RejectedError struct {
	Code    int
	Message string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("heartbeat rejected: %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// StatusCode is the HTTP status of the refusal.
func (e *RejectedError) StatusCode() int { return e.Code }

// IsRejected says whether err is the server's refusal with the given status code (0: any).
func IsRejected(err error, code int) bool {
	var r *RejectedError
	return errors.As(err, &r) && (code == 0 || r.Code == code)
}

// ReadBootID returns the node's boot ID, which changes on every boot.
func ReadBootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("reading the boot ID: %w", err)
	}
	return string(bytes.TrimSpace(b)), nil
}
