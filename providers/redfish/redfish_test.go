package redfish_test

import (
	"context"
	"crypto/x509"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
	"palisade.dev/palisade/providers/redfish"
	"palisade.dev/palisade/test/testbed/redfishsim"
)

// The tests run the provider through bmclib and gofish against redfishsim, a DMTF-shaped
// Redfish service over TLS (see its doc comment for why it is a stand-in).

const ns = "palisade-system"

// scene is a node whose BMC is svc, the method's Secrets and the provider.
type scene struct {
	svc    *redfishsim.Service
	p      *redfish.Provider
	method v1alpha1.Method
	fence  *v1alpha1.NodeFence
}

func newScene(t *testing.T, svc *redfishsim.Service, nodeAnnotations map[string]string, edit func(*v1alpha1.RedfishMethod), opts ...power.Option) *scene {
	t.Helper()
	return newSceneOfUUID(t, svc, "", nodeAnnotations, edit, opts...)
}

// newSceneOfUUID is newScene with a node whose kubelet reports systemUUID.
func newSceneOfUUID(t *testing.T, svc *redfishsim.Service, systemUUID string, nodeAnnotations map[string]string, edit func(*v1alpha1.RedfishMethod), opts ...power.Option) *scene {
	t.Helper()
	ann := map[string]string{v1alpha1.AnnotationBMCAddress: svc.Address()}
	for k, v := range nodeAnnotations {
		ann[k] = v
	}
	objs := []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: ann},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{SystemUUID: systemUUID}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc"}, Data: map[string][]byte{"username": []byte(svc.Username()), "password": []byte(svc.Password())}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wrong"}, Data: map[string][]byte{"username": []byte(svc.Username()), "password": []byte("not-the-password")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc-ca"}, Data: map[string][]byte{redfish.CABundleKey: svc.CACert()}},
	}
	m := &v1alpha1.RedfishMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: ns, Name: "bmc"},
		CABundleSecretRef: &v1alpha1.SecretReference{Namespace: ns, Name: "bmc-ca"}}
	if edit != nil {
		edit(m)
	}
	reader := fake.NewClientBuilder().WithObjects(objs...).Build()
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: types.UID("fence-1")}, Spec: v1alpha1.NodeFenceSpec{NodeName: "node-1"}}
	return &scene{svc: svc, p: redfish.New(reader, opts...), method: v1alpha1.Method{Name: "redfish", Type: v1alpha1.MethodRedfish, Redfish: m}, fence: nf}
}

func (s *scene) req(attempt int32, expired bool) providers.Request {
	return providers.Request{Fence: s.fence, Method: s.method, Attempt: attempt, Now: time.Now(), Expired: expired}
}

func (s *scene) fenceAndCheck(t *testing.T) (providers.Status, error) {
	t.Helper()
	if _, err := s.p.Fence(context.Background(), s.req(1, false)); err != nil {
		return providers.Status{}, err
	}
	return s.p.Check(context.Background(), s.req(1, false))
}

func TestForceOffConfirmedByPowerState(t *testing.T) {
	for _, basic := range []bool{false, true} {
		t.Run(map[bool]string{false: "session", true: "basic"}[basic], func(t *testing.T) {
			svc := redfishsim.Start(t, redfishsim.Options{})
			s := newScene(t, svc, nil, func(m *v1alpha1.RedfishMethod) { m.BasicAuth = basic })
			st, err := s.fenceAndCheck(t)
			if err != nil || st.State != providers.Confirmed {
				t.Fatalf("Check = %+v, %v; want Confirmed", st, err)
			}
			if svc.PoweredOn(0) {
				t.Error("the system is still on")
			}
			if got := svc.Resets(0); len(got) != 1 || got[0] != "ForceOff" {
				t.Errorf("resets = %v, want [ForceOff]", got)
			}
			if !strings.Contains(st.Message, "power state Off read back") {
				t.Errorf("message = %q", st.Message)
			}
			if n := svc.Sessions(); n != 0 {
				t.Errorf("%d sessions left open on the BMC, want each call to delete its own", n)
			}
		})
	}
}

func TestWrongCredentialsRefusedAndNotRetried(t *testing.T) {
	svc := redfishsim.Start(t, redfishsim.Options{Password: "the-real-pw"})
	s := newScene(t, svc, map[string]string{v1alpha1.AnnotationBMCSecret: "wrong"}, nil)
	_, err := s.p.Fence(context.Background(), s.req(1, false))
	if providers.ReasonOf(err) != providers.ReasonAuthFailed || providers.IsRetryable(err) {
		t.Fatalf("Fence error = %v (reason %s), want %s, not retryable", err, providers.ReasonOf(err), providers.ReasonAuthFailed)
	}
	if strings.Contains(err.Error(), "not-the-password") || strings.Contains(err.Error(), "the-real-pw") {
		t.Errorf("the error shows a password: %v", err)
	}
	if providers.HintOf(err) == "" {
		t.Error("no hint for people")
	}
	if len(svc.Resets(0)) != 0 || !svc.PoweredOn(0) || svc.AuthFailures() == 0 {
		t.Errorf("resets %v, on %v, auth failures %d: want no command carried out and the refusal seen", svc.Resets(0), svc.PoweredOn(0), svc.AuthFailures())
	}
}

func TestLyingBMCNeverConfirms(t *testing.T) {
	svc := redfishsim.Start(t, redfishsim.Options{})
	svc.SetIgnoreOff(true)
	s := newScene(t, svc, nil, nil)
	st, err := s.fenceAndCheck(t)
	if err != nil || st.State != providers.InProgress || st.Reason != providers.ReasonPowerStillOn {
		t.Fatalf("Check = %+v, %v; want InProgress PowerStillOn", st, err)
	}
	if _, err := s.p.Check(context.Background(), s.req(power.ResendOffEvery, false)); err != nil {
		t.Fatal(err)
	}
	if got := len(svc.Resets(0)); got != 2 {
		t.Errorf("%d ForceOff sent, want 2 (the command again at attempt %d)", got, power.ResendOffEvery)
	}
	st, err = s.p.Check(context.Background(), s.req(7, true))
	if err != nil || st.State != providers.Failed || st.Reason != providers.ReasonPowerStillOn || !strings.Contains(st.Message, "still reports power On") {
		t.Fatalf("Check once expired = %+v, %v; want Failed PowerStillOn", st, err)
	}
}

func TestSlowBMCIsUnreachableNotConfirmed(t *testing.T) {
	svc := redfishsim.Start(t, redfishsim.Options{})
	svc.SetDelay(3 * time.Second)
	s := newScene(t, svc, nil, nil, power.WithTimeout(time.Second))
	start := time.Now()
	_, err := s.p.Check(context.Background(), s.req(1, false))
	if providers.ReasonOf(err) != providers.ReasonUnreachable || !providers.IsRetryable(err) || !strings.Contains(err.Error(), "may or may not have taken effect") {
		t.Fatalf("Check error = %v (reason %s), want a retryable %s", err, providers.ReasonOf(err), providers.ReasonUnreachable)
	}
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Errorf("the call took %v, want it bounded by the 1 s timeout", took)
	}
}

func TestUntrustedCertificate(t *testing.T) {
	svc := redfishsim.Start(t, redfishsim.Options{})
	t.Run("system CAs only", func(t *testing.T) {
		s := newScene(t, svc, nil, func(m *v1alpha1.RedfishMethod) { m.CABundleSecretRef = nil })
		_, err := s.p.Fence(context.Background(), s.req(1, false))
		if providers.ReasonOf(err) != providers.ReasonUntrustedCertificate || providers.IsRetryable(err) {
			t.Fatalf("Fence error = %v (reason %s), want %s, not retryable", err, providers.ReasonOf(err), providers.ReasonUntrustedCertificate)
		}
		if !strings.Contains(providers.HintOf(err), "caBundleSecretRef") {
			t.Errorf("hint = %q, want it to name caBundleSecretRef", providers.HintOf(err))
		}
		if svc.AuthFailures() != 0 || len(svc.Resets(0)) != 0 {
			t.Error("the credentials or a command reached an untrusted BMC")
		}
	})
	t.Run("another CA's bundle", func(t *testing.T) {
		other := redfishsim.Start(t, redfishsim.Options{})
		s := newScene(t, svc, nil, nil)
		reader := fake.NewClientBuilder().WithObjects(
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: map[string]string{v1alpha1.AnnotationBMCAddress: svc.Address()}}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc"}, Data: map[string][]byte{"username": []byte(svc.Username()), "password": []byte(svc.Password())}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc-ca"}, Data: map[string][]byte{redfish.CABundleKey: other.CACert()}},
		).Build()
		_, err := redfish.New(reader).Fence(context.Background(), s.req(1, false))
		if providers.ReasonOf(err) != providers.ReasonUntrustedCertificate {
			t.Fatalf("Fence error = %v, want %s", err, providers.ReasonUntrustedCertificate)
		}
	})
	t.Run("insecureSkipVerify", func(t *testing.T) {
		s := newScene(t, svc, nil, func(m *v1alpha1.RedfishMethod) { m.CABundleSecretRef, m.InsecureSkipVerify = nil, true })
		if st, err := s.fenceAndCheck(t); err != nil || st.State != providers.Confirmed {
			t.Fatalf("Check = %+v, %v; want Confirmed", st, err)
		}
	})
}

func TestSystemChosenByAnnotation(t *testing.T) {
	svc := redfishsim.Start(t, redfishsim.Options{Systems: []string{"blade-a", "blade-b"}})
	t.Run("named", func(t *testing.T) {
		s := newScene(t, svc, map[string]string{v1alpha1.AnnotationRedfishSystem: "blade-b"}, nil)
		if st, err := s.fenceAndCheck(t); err != nil || st.State != providers.Confirmed {
			t.Fatalf("Check = %+v, %v; want Confirmed", st, err)
		}
		if !svc.PoweredOn(0) || svc.PoweredOn(1) {
			t.Errorf("power a=%v b=%v, want only blade-b off", svc.PoweredOn(0), svc.PoweredOn(1))
		}
	})
	t.Run("unnamed among several", func(t *testing.T) {
		s := newScene(t, svc, nil, nil)
		_, err := s.p.Fence(context.Background(), s.req(1, false))
		if providers.ReasonOf(err) != providers.ReasonBadTarget || !svc.PoweredOn(0) {
			t.Fatalf("Fence = %v with blade-a on=%v: want %s and nothing powered off", err, svc.PoweredOn(0), providers.ReasonBadTarget)
		}
	})
}

func TestAmbiguousSystemName(t *testing.T) {
	svc := redfishsim.Start(t, redfishsim.Options{Systems: []string{"blade", "blade"}})
	svc.SetPower(0, false) // the first "blade" is off: read back, it would confirm the other
	s := newScene(t, svc, map[string]string{v1alpha1.AnnotationRedfishSystem: "blade"}, nil)
	_, err := s.p.Fence(context.Background(), s.req(1, false))
	if providers.ReasonOf(err) != providers.ReasonBadTarget || providers.IsRetryable(err) {
		t.Fatalf("Fence error = %v (reason %s), want %s, not retryable", err, providers.ReasonOf(err), providers.ReasonBadTarget)
	}
	for _, want := range []string{`ambiguous system "blade"`, "2 systems", "Ids 1, 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Fence error %q does not say %q", err, want)
		}
	}
	st, err := s.p.Check(context.Background(), s.req(1, false))
	if providers.ReasonOf(err) != providers.ReasonBadTarget || st.State == providers.Confirmed {
		t.Fatalf("Check = %+v, %v; want BadTarget, never Confirmed by the system that is off", st, err)
	}
	if svc.PoweredOn(0) || !svc.PoweredOn(1) || len(svc.Resets(0))+len(svc.Resets(1)) != 0 {
		t.Errorf("power %v %v, resets %v %v: want both systems as they were and no command sent", svc.PoweredOn(0), svc.PoweredOn(1), svc.Resets(0), svc.Resets(1))
	}
	if n := svc.Sessions(); n != 0 {
		t.Errorf("%d sessions left open on the BMC, want the listing's deleted", n)
	}
}

func TestBadTargets(t *testing.T) {
	svc := redfishsim.Start(t, redfishsim.Options{})
	for name, ann := range map[string]map[string]string{
		"scheme":         {v1alpha1.AnnotationBMCAddress: "https://" + svc.Address()},
		"port":           {v1alpha1.AnnotationBMCAddress: "127.0.0.1:99999"},
		"missing secret": {v1alpha1.AnnotationBMCSecret: "nope"},
	} {
		t.Run(name, func(t *testing.T) {
			s := newScene(t, svc, ann, nil)
			_, err := s.p.Fence(context.Background(), s.req(1, false))
			if providers.ReasonOf(err) != providers.ReasonBadTarget || providers.IsRetryable(err) {
				t.Fatalf("Fence error = %v, want %s", err, providers.ReasonBadTarget)
			}
		})
	}
	if len(svc.Resets(0)) != 0 || svc.AuthFailures() != 0 {
		t.Error("a bad target reached the BMC")
	}
}

// The node's SMBIOS UUID as its kubelet reports it, the same UUID with its first three groups
// byte-swapped (SMBIOS before 2.6, some BMCs), and another machine's.
const (
	nodeUUID    = "4c4c4544-0047-3610-8031-b4c04f564433"
	swappedUUID = "44454c4c-4700-1036-8031-b4c04f564433"
	otherUUID   = "4c4c4544-0047-3610-8031-b4c04f564434"
)

func TestPowerOffOnlyOfTheNodesMachine(t *testing.T) {
	for _, tc := range []struct {
		name       string
		nodeUUID   string
		systems    []string
		uuids      []string
		annotation string // palisade.dev/redfish-system
		noCheck    bool   // palisade.dev/bmc-identity-check: "false"
		want       int    // the system powered off, -1 for none
		// unchecked is why the command's step says the machine was not checked, "" for a
		// machine checked.
		unchecked string
	}{
		{name: "same UUID", nodeUUID: nodeUUID, uuids: []string{nodeUUID}, want: 0},
		{name: "same UUID, other case and braces", nodeUUID: " " + strings.ToUpper(nodeUUID), uuids: []string{"{" + nodeUUID + "}"}, want: 0},
		{name: "first three groups byte-swapped", nodeUUID: nodeUUID, uuids: []string{swappedUUID}, want: 0},
		{name: "another machine", nodeUUID: nodeUUID, uuids: []string{otherUUID}, want: -1},
		{name: "another machine, the check turned off", nodeUUID: nodeUUID, uuids: []string{otherUUID}, noCheck: true, want: 0,
			unchecked: "the check is switched off by node node-1's annotation " + v1alpha1.AnnotationBMCIdentityCheck + "=false"},
		{name: "node reports no UUID", uuids: []string{otherUUID}, want: 0, unchecked: `node node-1 reports systemUUID "", which is no SMBIOS UUID`},
		{name: "node reports its machine-id (no SMBIOS tables)", nodeUUID: "4c4c4544004736108031b4c04f564433", uuids: []string{otherUUID}, want: 0,
			unchecked: `node node-1 reports systemUUID "4c4c4544004736108031b4c04f564433", which is no SMBIOS UUID`},
		{name: "system reports no UUID", nodeUUID: nodeUUID, want: 0, unchecked: `the BMC's system "System-1" (Id "1") reports UUID "": none, not a UUID, or a placeholder`},
		{name: "system reports a placeholder", nodeUUID: nodeUUID, uuids: []string{"03000200-0400-0500-0006-000700080009"}, want: 0, unchecked: `the BMC's system "System-1" (Id "1") reports UUID "03000200-0400-0500-0006-000700080009": none, not a UUID, or a placeholder`},
		{name: "the named system's UUID", nodeUUID: nodeUUID, systems: []string{"blade-a", "blade-b"}, uuids: []string{otherUUID, nodeUUID}, annotation: "blade-b", want: 1},
		{name: "the named system is another machine", nodeUUID: nodeUUID, systems: []string{"blade-a", "blade-b"}, uuids: []string{nodeUUID, otherUUID}, annotation: "blade-b", want: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := redfishsim.Start(t, redfishsim.Options{Systems: tc.systems, UUIDs: tc.uuids})
			ann := map[string]string{}
			if tc.annotation != "" {
				ann[v1alpha1.AnnotationRedfishSystem] = tc.annotation
			}
			if tc.noCheck {
				ann[v1alpha1.AnnotationBMCIdentityCheck] = "false"
			}
			s := newSceneOfUUID(t, svc, tc.nodeUUID, ann, nil)
			fence, err := s.p.Fence(context.Background(), s.req(1, false))
			st := fence
			if err == nil {
				st, err = s.p.Check(context.Background(), s.req(1, false))
			}
			if tc.want >= 0 {
				if err != nil || st.State != providers.Confirmed {
					t.Fatalf("Check = %+v, %v; want Confirmed", st, err)
				}
				if want := "not checked that it controls the node's machine: " + tc.unchecked; tc.unchecked != "" && !strings.Contains(fence.Message, want) ||
					tc.unchecked == "" && strings.Contains(fence.Message, "not checked") {
					t.Errorf("Fence's message %q; want it to say %q", fence.Message, tc.unchecked)
				}
			} else {
				if providers.ReasonOf(err) != providers.ReasonBadTarget || providers.IsRetryable(err) {
					t.Fatalf("Fence error = %v (reason %s), want %s, not retryable", err, providers.ReasonOf(err), providers.ReasonBadTarget)
				}
				for _, want := range []string{"UUID " + otherUUID, "systemUUID " + nodeUUID, svc.Address(), v1alpha1.AnnotationBMCAddress, v1alpha1.AnnotationRedfishSystem, v1alpha1.AnnotationBMCIdentityCheck + "=false"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Fence error %q does not say %q", err, want)
					}
				}
			}
			for i := range max(len(tc.systems), 1) {
				wantResets := 0
				if i == tc.want {
					wantResets = 1
				}
				if got := svc.Resets(i); len(got) != wantResets || svc.PoweredOn(i) != (i != tc.want) {
					t.Errorf("system %d: resets %v, on %v; want %d ForceOff and on %v", i, got, svc.PoweredOn(i), wantResets, i != tc.want)
				}
			}
			if n := svc.Sessions(); n != 0 {
				t.Errorf("%d sessions left open on the BMC, want each call to delete its own", n)
			}
		})
	}
}

func TestPowerOnOnlyOfTheNodesMachine(t *testing.T) {
	svc := redfishsim.Start(t, redfishsim.Options{UUIDs: []string{otherUUID}})
	svc.SetPower(0, false)
	s := newSceneOfUUID(t, svc, nodeUUID, nil, nil)
	target, err := s.p.Target(context.Background(), s.req(1, false))
	if err != nil {
		t.Fatal(err)
	}
	err = s.p.PowerOn(context.Background(), target)
	if providers.ReasonOf(err) != providers.ReasonBadTarget || !strings.Contains(err.Error(), "UUID "+otherUUID) {
		t.Fatalf("PowerOn error = %v (reason %s), want %s naming the system's UUID", err, providers.ReasonOf(err), providers.ReasonBadTarget)
	}
	if got := svc.Resets(0); len(got) != 0 || svc.PoweredOn(0) {
		t.Errorf("resets %v, on %v; want no command and the machine left off", got, svc.PoweredOn(0))
	}
}

// A BMC named by a round-robin DNS name whose addresses are the node's machine's BMC and
// another machine's (each with a certificate for the name alone): each call resolves the name
// once, and its listing of the systems and its command both go to that address, the
// certificate still verified against the name. The call that resolves to the node's BMC powers the node's
// machine off; the one that resolves to the other machine's is refused by the UUID check, and
// that machine gets no command either way. A read-back is checked too: a read of the other
// machine is refused, not taken for the node's power state.
func TestNameResolvedOncePerCall(t *testing.T) {
	const name = "bmc.rack-7.example"
	node := redfishsim.Start(t, redfishsim.Options{Addr: "127.0.0.2:0", UUIDs: []string{nodeUUID}, Names: []string{name}})
	_, port, _ := net.SplitHostPort(node.Address())
	other := redfishsim.Start(t, redfishsim.Options{Addr: net.JoinHostPort("127.0.0.3", port), UUIDs: []string{otherUUID}, Names: []string{name}})
	var lookups atomic.Int32
	addrs := []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")}
	p := redfish.New(nil, power.WithLookup(func(_ context.Context, host string) ([]netip.Addr, error) {
		if host != name {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		i := int(lookups.Add(1)-1) % len(addrs)
		return addrs[i : i+1], nil
	}))
	cas := x509.NewCertPool()
	cas.AppendCertsFromPEM(node.CACert())
	cas.AppendCertsFromPEM(other.CACert())
	target := redfish.Target{Node: "node-1", Address: net.JoinHostPort(name, port), SystemUUID: nodeUUID,
		Username: node.Username(), Password: node.Password(), RootCAs: cas}

	if err := p.PowerOff(context.Background(), target); err != nil {
		t.Fatalf("PowerOff through the name's first address: %v", err)
	}
	if n := lookups.Load(); n != 1 {
		t.Errorf("the call looked the name up %d times, want 1", n)
	}
	if node.PoweredOn(0) {
		t.Errorf("the node's machine is still on")
	}
	if got := other.Resets(0); len(got) != 0 || !other.PoweredOn(0) {
		t.Fatalf("the other machine got %v (on: %v), want no command", got, other.PoweredOn(0))
	}

	// The next lookup gives the other machine's address: refused.
	err := p.PowerOff(context.Background(), target)
	if providers.ReasonOf(err) != providers.ReasonBadTarget || !strings.Contains(err.Error(), "UUID "+otherUUID) || !strings.Contains(err.Error(), name+" resolved to 127.0.0.3") {
		t.Fatalf("PowerOff error = %v (reason %s), want %s naming the other system's UUID and the address the name resolved to", err, providers.ReasonOf(err), providers.ReasonBadTarget)
	}
	if n := lookups.Load(); n != 2 {
		t.Errorf("two calls looked the name up %d times, want 2", n)
	}
	if got := other.Resets(0); len(got) != 0 || !other.PoweredOn(0) {
		t.Fatalf("the other machine got %v (on: %v), want no command", got, other.PoweredOn(0))
	}

	// Read-backs: the node's machine reads Off; the other machine, off too, is not read: its
	// Off says nothing about the node's.
	if st, err := p.PowerState(context.Background(), target); err != nil || st != power.Off {
		t.Errorf("PowerState of the node's machine = %v, %v; want Off", st, err)
	}
	other.SetPower(0, false)
	st, err := p.PowerState(context.Background(), target)
	if providers.ReasonOf(err) != providers.ReasonBadTarget || st == power.Off {
		t.Errorf("PowerState of the other machine = %v, %v (reason %s), want %s", st, err, providers.ReasonOf(err), providers.ReasonBadTarget)
	}

	// The certificates hold the name only: verified against the name, not the address dialled.
	// A name they do not hold, resolved to the same BMC, is refused before anything is sent.
	p = redfish.New(nil, power.WithLookup(func(context.Context, string) ([]netip.Addr, error) { return addrs[:1], nil }))
	target.Address = net.JoinHostPort("bmc.rack-9.example", port)
	if _, err := p.PowerState(context.Background(), target); providers.ReasonOf(err) != providers.ReasonUntrustedCertificate {
		t.Errorf("PowerState through a name the certificate does not hold: %v (reason %s), want %s", err, providers.ReasonOf(err), providers.ReasonUntrustedCertificate)
	}

	// A name that does not resolve: Unreachable, naming it.
	p = redfish.New(nil, power.WithLookup(func(_ context.Context, host string) ([]netip.Addr, error) {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}))
	target.Address = "bmc.rack-8.example"
	if _, err := p.PowerState(context.Background(), target); providers.ReasonOf(err) != providers.ReasonUnreachable || !strings.Contains(err.Error(), `"bmc.rack-8.example"`) {
		t.Errorf("PowerState of a name that does not resolve: %v (reason %s), want %s naming it", err, providers.ReasonOf(err), providers.ReasonUnreachable)
	}
}

// A BMC that answers with a huge page (a web front end in trouble, which gzips it when the
// client takes gzip: the provider does not) is read no further than MaxAnswer: the call fails at once, retryable (the BMC may recover), saying the answer was
// too long, instead of reading the page whole into memory and into the error's
// text, and no command is carried out.
func TestHugeAnswerNotReadWhole(t *testing.T) {
	svc := redfishsim.Start(t, redfishsim.Options{})
	svc.SetErrorPage(64 << 20)
	s := newScene(t, svc, nil, nil, power.WithTimeout(10*time.Second))
	start := time.Now()
	_, err := s.p.Fence(context.Background(), s.req(1, false))
	if err == nil || !strings.Contains(err.Error(), "longer than 1048576 bytes") {
		t.Fatalf("Fence against a 64 MiB answer: %v, want it refused as too long", err)
	}
	if !providers.IsRetryable(err) {
		t.Errorf("%s not retryable: the BMC may answer well on the next try", providers.ReasonOf(err))
	}
	if n := len(err.Error()); n > redfish.MaxAnswer+4096 {
		t.Errorf("the error's text holds %d bytes, want at most the answer's bound", n)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the call took %s, want it to stop reading at the bound", took)
	}
	if len(svc.Resets(0)) != 0 || !svc.PoweredOn(0) {
		t.Errorf("resets %v, on %v: want no command carried out", svc.Resets(0), svc.PoweredOn(0))
	}
}
