// Package redfishsim is a Redfish service for tests, served over TLS with its own CA, shaped
// like the DMTF schema (ServiceRoot v1.5, SessionService with X-Auth-Token sessions, Basic
// auth, a Systems collection of ComputerSystem v1.10 with PowerState and the
// #ComputerSystem.Reset action and its allowable values, Redfish error bodies).
//
// It is a stand-in: no Redfish emulator can be installed on the test machines (DMTF's
// Redfish-Interface-Emulator and sushy-tools are Python programs that Debian does not package
// and the module proxy does not serve), so it implements the resources and the behaviour a
// fencing client relies on — and the faults it must survive: a BMC that accepts ForceOff but
// keeps the power on (SetIgnoreOff), a slow BMC (SetDelay), and a machine power hook
// (OnPower) with which the real-machine test bed turns its machine off.
package redfishsim

import (
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configure a Service.
type Options struct {
	// Username and Password are the one account (default "admin" / "redfish-secret").
	Username, Password string
	// Systems are the Names of its ComputerSystems, at /redfish/v1/Systems/1, /2, … (default
	// one system, "System-1"), every one powered on.
	Systems []string
	// UUIDs, parallel to Systems, are the systems' UUID properties; a system without one (the
	// default: none) is served without the property.
	UUIDs []string
	// Addr is where it listens (default 127.0.0.1:0).
	Addr string
	// Names are the DNS names its certificate holds instead of its address (default: its
	// address only), so that a client reaching it by address cannot verify it.
	Names []string
}

// Service is a running Redfish service. It is safe for concurrent use.
type Service struct {
	opts   Options
	ln     net.Listener
	srv    *http.Server
	caPEM  []byte
	mu     sync.Mutex
	power  []bool     // per system: on
	resets [][]string // per system: the ResetTypes received
	// sessions maps a token to its session ID.
	sessions   map[string]string
	nextID     int
	ignoreOff  bool
	delay      time.Duration
	errorPage  int
	onPower    func(system string, on bool)
	authFailed int
}

// Start serves a Redfish service until the test ends.
func Start(t testing.TB, o Options) *Service {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// New starts a Redfish service; Close stops it.
func New(o Options) (*Service, error) {
	if o.Username == "" {
		o.Username = "admin"
	}
	if o.Password == "" {
		o.Password = "redfish-secret"
	}
	if len(o.Systems) == 0 {
		o.Systems = []string{"System-1"}
	}
	if len(o.UUIDs) > len(o.Systems) {
		return nil, fmt.Errorf("redfishsim: %d UUIDs for %d systems", len(o.UUIDs), len(o.Systems))
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("redfishsim: %w", err)
	}
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	cert, caPEM, err := selfSigned(host, o.Names)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s := &Service{opts: o, ln: ln, caPEM: caPEM, power: make([]bool, len(o.Systems)), resets: make([][]string, len(o.Systems)), sessions: map[string]string{}}
	for i := range s.power {
		s.power[i] = true
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ErrorLog:  log.New(io.Discard, "", 0)} // refused handshakes are what some tests are for
	go func() { _ = s.srv.ServeTLS(ln, "", "") }()
	return s, nil
}

// Close stops the service.
func (s *Service) Close() error { return s.srv.Close() }

// Address is host:port.
func (s *Service) Address() string { return s.ln.Addr().String() }

// CACert is the PEM certificate of the CA that signed the service's certificate.
func (s *Service) CACert() []byte { return s.caPEM }

// Username and Password are the account's credentials.
func (s *Service) Username() string { return s.opts.Username }
func (s *Service) Password() string { return s.opts.Password }

// SetPower sets system i's (0-based) power, as the machine's own button would.
func (s *Service) SetPower(i int, on bool) {
	s.mu.Lock()
	s.power[i] = on
	hook := s.onPower
	s.mu.Unlock()
	if hook != nil {
		hook(s.opts.Systems[i], on)
	}
}

// PoweredOn says whether system i is on.
func (s *Service) PoweredOn(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.power[i]
}

// Resets are the ResetTypes system i received, in order.
func (s *Service) Resets(i int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.resets[i]...)
}

// Sessions counts the open sessions.
func (s *Service) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// AuthFailures counts the requests refused for bad credentials or tokens.
func (s *Service) AuthFailures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.authFailed
}

// SetIgnoreOff makes the service lie: it accepts ForceOff and GracefulShutdown and keeps the
// power on.
func (s *Service) SetIgnoreOff(ignore bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ignoreOff = ignore
}

// SetDelay delays every answer by d.
func (s *Service) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// SetErrorPage makes every answer a 500 with an HTML page of n bytes (0: answer as usual), as
// a BMC's web front end in trouble may send: a provider must not read it whole.
func (s *Service) SetErrorPage(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errorPage = n
}

// OnPower calls fn after every change of a system's power (a Reset or SetPower).
func (s *Service) OnPower(fn func(system string, on bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onPower = fn
}

const (
	root         = "/redfish/v1"
	sessionsPath = root + "/SessionService/Sessions"
	systemsPath  = root + "/Systems"
)

func (s *Service) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	delay, page := s.delay, s.errorPage
	s.mu.Unlock()
	if page > 0 {
		// gzipped when the client takes it, as a front end (nginx) does: a few KiB on the wire.
		var out io.Writer = w
		w.Header().Set("Content-Type", "text/html")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			defer zw.Close()
			out = zw
		}
		w.WriteHeader(http.StatusInternalServerError)
		line := []byte(strings.Repeat("<p>internal error</p>", 50) + "\n")
		for sent := 0; sent < page; sent += len(line) {
			if _, err := out.Write(line[:min(len(line), page-sent)]); err != nil {
				return
			}
		}
		return
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case path == root && r.Method == http.MethodGet:
		s.json(w, http.StatusOK, s.serviceRoot())
	case path == sessionsPath && r.Method == http.MethodPost:
		s.createSession(w, r)
	case strings.HasPrefix(path, sessionsPath+"/") && r.Method == http.MethodDelete:
		if !s.authorized(w, r) {
			return
		}
		s.deleteSession(strings.TrimPrefix(path, sessionsPath+"/"))
		w.WriteHeader(http.StatusNoContent)
	case path == systemsPath && r.Method == http.MethodGet:
		if s.authorized(w, r) {
			s.json(w, http.StatusOK, s.systemsCollection())
		}
	case strings.HasPrefix(path, systemsPath+"/"):
		if s.authorized(w, r) {
			s.system(w, r, strings.TrimPrefix(path, systemsPath+"/"))
		}
	default:
		s.fail(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
	}
}

func (s *Service) serviceRoot() map[string]any {
	return map[string]any{
		"@odata.id": root, "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot", "Id": "RootService", "Name": "Root Service",
		"RedfishVersion": "1.6.0", "UUID": "92384634-2938-2342-8820-489239905423",
		"Systems":        odataID(systemsPath),
		"SessionService": odataID(root + "/SessionService"),
		"Links":          map[string]any{"Sessions": odataID(sessionsPath)},
	}
}

func (s *Service) systemsCollection() map[string]any {
	members := make([]any, len(s.opts.Systems))
	for i := range s.opts.Systems {
		members[i] = odataID(fmt.Sprintf("%s/%d", systemsPath, i+1))
	}
	return map[string]any{
		"@odata.id": systemsPath, "@odata.type": "#ComputerSystemCollection.ComputerSystemCollection",
		"Name": "Computer System Collection", "Members@odata.count": len(members), "Members": members,
	}
}

// system serves /Systems/{id} and its Reset action.
func (s *Service) system(w http.ResponseWriter, r *http.Request, rest string) {
	id, action, _ := strings.Cut(rest, "/")
	var i int
	if _, err := fmt.Sscanf(id, "%d", &i); err != nil || i < 1 || i > len(s.opts.Systems) || fmt.Sprint(i) != id {
		s.fail(w, http.StatusNotFound, "Base.1.8.ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
		return
	}
	i--
	switch {
	case action == "" && r.Method == http.MethodGet:
		s.json(w, http.StatusOK, s.computerSystem(i))
	case action == "Actions/ComputerSystem.Reset" && r.Method == http.MethodPost:
		s.reset(w, r, i)
	default:
		s.fail(w, http.StatusMethodNotAllowed, "Base.1.8.ActionNotSupported", fmt.Sprintf("%s %s is not supported.", r.Method, r.URL.Path))
	}
}

func (s *Service) computerSystem(i int) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	state := "Off"
	if s.power[i] {
		state = "On"
	}
	self := fmt.Sprintf("%s/%d", systemsPath, i+1)
	sys := map[string]any{
		"@odata.id": self, "@odata.type": "#ComputerSystem.v1_10_0.ComputerSystem",
		"Id": fmt.Sprint(i + 1), "Name": s.opts.Systems[i], "SystemType": "Physical", "PowerState": state,
		"Status": map[string]any{"State": "Enabled", "Health": "OK"},
		"Actions": map[string]any{"#ComputerSystem.Reset": map[string]any{
			"target":                            self + "/Actions/ComputerSystem.Reset",
			"ResetType@Redfish.AllowableValues": []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle"},
		}},
	}
	if i < len(s.opts.UUIDs) && s.opts.UUIDs[i] != "" {
		sys["UUID"] = s.opts.UUIDs[i]
	}
	return sys
}

func (s *Service) reset(w http.ResponseWriter, r *http.Request, i int) {
	var body struct{ ResetType string }
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&body); err != nil {
		s.fail(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	on := true
	switch body.ResetType {
	case "On", "ForceRestart", "PowerCycle":
	case "ForceOff", "GracefulShutdown":
		on = false
	default:
		s.fail(w, http.StatusBadRequest, "Base.1.8.ActionParameterValueNotInList", fmt.Sprintf("The value %q for the parameter ResetType is not in the list of acceptable values.", body.ResetType))
		return
	}
	s.mu.Lock()
	s.resets[i] = append(s.resets[i], body.ResetType)
	changed := !(s.ignoreOff && !on) && s.power[i] != on
	if changed {
		s.power[i] = on
	}
	hook := s.onPower
	s.mu.Unlock()
	if changed && hook != nil {
		hook(s.opts.Systems[i], on)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Service) createSession(w http.ResponseWriter, r *http.Request) {
	var body struct{ UserName, Password string }
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&body); err != nil {
		s.fail(w, http.StatusBadRequest, "Base.1.8.MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	if !s.credentialsMatch(body.UserName, body.Password) {
		s.refuse(w)
		return
	}
	token := randomHex(16)
	s.mu.Lock()
	s.nextID++
	id := fmt.Sprint(s.nextID)
	s.sessions[token] = id
	s.mu.Unlock()
	loc := sessionsPath + "/" + id
	w.Header().Set("X-Auth-Token", token)
	w.Header().Set("Location", loc)
	s.json(w, http.StatusCreated, map[string]any{"@odata.id": loc, "@odata.type": "#Session.v1_1_0.Session", "Id": id, "Name": "User Session", "UserName": body.UserName})
}

func (s *Service) deleteSession(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for token, sid := range s.sessions {
		if sid == id {
			delete(s.sessions, token)
		}
	}
}

// authorized accepts a live session's X-Auth-Token or Basic credentials, and answers 401
// otherwise.
func (s *Service) authorized(w http.ResponseWriter, r *http.Request) bool {
	if token := r.Header.Get("X-Auth-Token"); token != "" {
		s.mu.Lock()
		_, ok := s.sessions[token]
		s.mu.Unlock()
		if ok {
			return true
		}
	} else if u, p, ok := r.BasicAuth(); ok && s.credentialsMatch(u, p) {
		return true
	}
	s.refuse(w)
	return false
}

func (s *Service) credentialsMatch(u, p string) bool {
	return subtle.ConstantTimeCompare([]byte(u), []byte(s.opts.Username)) == 1 &&
		subtle.ConstantTimeCompare([]byte(p), []byte(s.opts.Password)) == 1
}

func (s *Service) refuse(w http.ResponseWriter) {
	s.mu.Lock()
	s.authFailed++
	s.mu.Unlock()
	w.Header().Set("WWW-Authenticate", `Basic realm="Redfish"`)
	s.fail(w, http.StatusUnauthorized, "Base.1.8.NoValidSession", "There is no valid session established with the implementation.")
}

// fail writes a Redfish error body.
func (s *Service) fail(w http.ResponseWriter, code int, id, msg string) {
	s.json(w, code, map[string]any{"error": map[string]any{
		"code": id, "message": msg,
		"@Message.ExtendedInfo": []any{map[string]any{"MessageId": id, "Message": msg, "Severity": "Critical"}},
	}})
}

func (s *Service) json(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("OData-Version", "4.0")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func odataID(p string) map[string]any { return map[string]any{"@odata.id": p} }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// selfSigned makes a CA and a server certificate for host signed by it.
func selfSigned(host string, names []string) (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redfishsim CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "bmc"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	switch ip := net.ParseIP(host); {
	case len(names) > 0:
		tmpl.DNSNames = names
	case ip != nil:
		tmpl.IPAddresses = []net.IP{ip}
	default:
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}
