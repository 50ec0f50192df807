package vsphere_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
	"palisade.dev/palisade/providers/power"
	"palisade.dev/palisade/providers/vsphere"
)

// The tests run the provider through govmomi against vcsim, govmomi's own vCenter simulator,
// over TLS with a login of its own.

const (
	ns       = "palisade-system"
	user     = "fencer@vsphere.local"
	password = "vc-pw-5e1d"
)

type scene struct {
	vm     *simulator.VirtualMachine
	model  *simulator.Model
	srv    *simulator.Server
	server string
	caPEM  []byte
	p      *vsphere.Provider
	method v1alpha1.Method
}

func start(t *testing.T) *scene {
	t.Helper()
	model := simulator.VPX()
	if err := model.Create(); err != nil {
		t.Fatal(err)
	}
	model.Service.TLS = new(tls.Config)
	model.Service.Listen = &url.URL{User: url.UserPassword(user, password)}
	srv := model.Service.NewServer()
	t.Cleanup(func() { srv.Close(); model.Remove() })
	vm := model.Map().Any("VirtualMachine").(*simulator.VirtualMachine)
	return &scene{vm: vm, model: model, srv: srv, server: srv.URL.Host,
		caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}
}

// provider builds the provider for node-1 on providerID, with the Secret's password.
func (s *scene) provider(t *testing.T, providerID, pw string, edit func(*v1alpha1.VSphereMethod)) {
	t.Helper()
	reader := fake.NewClientBuilder().WithObjects(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: corev1.NodeSpec{ProviderID: providerID}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vc"}, Data: map[string][]byte{"username": []byte(user), "password": []byte(pw)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vc-ca"}, Data: map[string][]byte{power.CABundleKey: s.caPEM}},
	).Build()
	m := &v1alpha1.VSphereMethod{Server: s.server, CredentialsSecretRef: v1alpha1.SecretReference{Namespace: ns, Name: "vc"},
		CABundleSecretRef: &v1alpha1.SecretReference{Namespace: ns, Name: "vc-ca"}}
	if edit != nil {
		edit(m)
	}
	s.p = vsphere.New(reader, power.WithTimeout(10*time.Second))
	s.method = v1alpha1.Method{Name: "vsphere", Type: v1alpha1.MethodVSphere, VSphere: m}
}

func (s *scene) req(attempt int32, expired bool) providers.Request {
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: k8stypes.UID("fence-1")}, Spec: v1alpha1.NodeFenceSpec{NodeName: "node-1"}}
	return providers.Request{Fence: nf, Method: s.method, Attempt: attempt, Now: time.Now(), Expired: expired}
}

// stallLogout puts a TLS front before vcsim that holds every Logout call until the test ends
// or the client hangs up, as a vCenter that hangs on Logout does, and points the scene at it;
// it returns the count of Logout calls held. Call it before provider.
func (s *scene) stallLogout(t *testing.T) *atomic.Int32 {
	t.Helper()
	held, release, vcsim := new(atomic.Int32), make(chan struct{}), s.srv.Config.Handler
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte("<Logout")) {
			held.Add(1)
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		vcsim.ServeHTTP(w, r)
	}))
	front.StartTLS()
	t.Cleanup(front.Close)
	t.Cleanup(func() { close(release) }) // before front.Close, which waits for held calls
	s.server = front.Listener.Addr().String()
	s.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: front.Certificate().Raw})
	return held
}

// twin gives another VM of the inventory the node's VM's BIOS UUID, powered off: a clone that
// kept its source's UUID, or a copy in another datacenter.
func (s *scene) twin(t *testing.T) *simulator.VirtualMachine {
	t.Helper()
	for _, e := range s.model.Map().All("VirtualMachine") {
		if vm := e.(*simulator.VirtualMachine); vm.Self != s.vm.Self {
			vm.Config.Uuid = s.vm.Config.Uuid
			setPowerState(vm, types.VirtualMachinePowerStatePoweredOff)
			return vm
		}
	}
	t.Fatal("vcsim's inventory holds one VM only")
	return nil
}

func setPowerState(vm *simulator.VirtualMachine, state types.VirtualMachinePowerState) {
	vm.Runtime.PowerState, vm.Summary.Runtime.PowerState = state, state
}

func (s *scene) providerID() string { return "vsphere://" + s.vm.Config.Uuid }

func (s *scene) powerState() types.VirtualMachinePowerState { return s.vm.Runtime.PowerState }

func TestPowerOffConfirmedByPowerState(t *testing.T) {
	s := start(t)
	s.provider(t, s.providerID(), password, nil)
	if s.powerState() != types.VirtualMachinePowerStatePoweredOn {
		t.Fatalf("the VM starts %s, want poweredOn", s.powerState())
	}
	if _, err := s.p.Fence(context.Background(), s.req(1, false)); err != nil {
		t.Fatal(err)
	}
	st, err := s.p.Check(context.Background(), s.req(1, false))
	if err != nil || st.State != providers.Confirmed {
		t.Fatalf("Check = %+v, %v; want Confirmed", st, err)
	}
	if s.powerState() != types.VirtualMachinePowerStatePoweredOff {
		t.Errorf("the VM is %s", s.powerState())
	}
}

func TestVMThatRefusesPowerOff(t *testing.T) {
	s := start(t)
	s.vm.DisabledMethod = append(s.vm.DisabledMethod, "PowerOffVMTask")
	s.provider(t, s.providerID(), password, nil)
	_, err := s.p.Fence(context.Background(), s.req(1, false))
	if providers.ReasonOf(err) != providers.ReasonCloudRefused || !providers.IsRetryable(err) {
		t.Fatalf("Fence error = %v (reason %s), want %s", err, providers.ReasonOf(err), providers.ReasonCloudRefused)
	}
	st, err := s.p.Check(context.Background(), s.req(3, true))
	if err != nil || st.State != providers.Failed || st.Reason != providers.ReasonPowerStillOn {
		t.Fatalf("Check once expired = %+v, %v; want Failed PowerStillOn", st, err)
	}
	if s.powerState() != types.VirtualMachinePowerStatePoweredOn {
		t.Errorf("the VM is %s", s.powerState())
	}
}

func TestSuspendedIsNotOff(t *testing.T) {
	s := start(t)
	setPowerState(s.vm, types.VirtualMachinePowerStateSuspended)
	s.provider(t, s.providerID(), password, nil)
	st, err := s.p.Check(context.Background(), s.req(1, false))
	if err != nil || st.State == providers.Confirmed || !strings.Contains(st.Message, "suspended") {
		t.Fatalf("Check = %+v, %v; want not confirmed, naming the state", st, err)
	}
}

func TestWrongPassword(t *testing.T) {
	s := start(t)
	s.provider(t, s.providerID(), "not-the-password", nil)
	_, err := s.p.Fence(context.Background(), s.req(1, false))
	if providers.ReasonOf(err) != providers.ReasonCloudAuthFailed || providers.IsRetryable(err) {
		t.Fatalf("Fence error = %v (reason %s), want %s, not retryable", err, providers.ReasonOf(err), providers.ReasonCloudAuthFailed)
	}
	if strings.Contains(err.Error(), "not-the-password") || strings.Contains(err.Error(), password) {
		t.Errorf("the error shows a password: %v", err)
	}
	if s.powerState() != types.VirtualMachinePowerStatePoweredOn {
		t.Errorf("the VM is %s", s.powerState())
	}
}

func TestUntrustedCertificate(t *testing.T) {
	s := start(t)
	s.provider(t, s.providerID(), password, func(m *v1alpha1.VSphereMethod) { m.CABundleSecretRef = nil })
	_, err := s.p.Fence(context.Background(), s.req(1, false))
	if providers.ReasonOf(err) != providers.ReasonUntrustedCertificate || providers.IsRetryable(err) {
		t.Fatalf("Fence error = %v (reason %s), want %s", err, providers.ReasonOf(err), providers.ReasonUntrustedCertificate)
	}
	s.provider(t, s.providerID(), password, func(m *v1alpha1.VSphereMethod) { m.CABundleSecretRef, m.InsecureSkipVerify = nil, true })
	if _, err := s.p.Fence(context.Background(), s.req(1, false)); err != nil {
		t.Fatalf("with insecureSkipVerify: %v", err)
	}
}

func TestUnknownVMIsBadTargetNeverGone(t *testing.T) {
	s := start(t)
	s.provider(t, "vsphere://00000000-1111-2222-3333-444444444444", password, nil)
	st, err := s.p.Check(context.Background(), s.req(1, false))
	if providers.ReasonOf(err) != providers.ReasonBadTarget || st.State == providers.Gone {
		t.Fatalf("Check = %+v, %v; want BadTarget, never Gone", st, err)
	}
}

func TestDuplicateBIOSUUIDIsBadTarget(t *testing.T) {
	s := start(t)
	twin := s.twin(t)
	s.provider(t, s.providerID(), password, nil)
	_, err := s.p.Fence(context.Background(), s.req(1, false))
	if providers.ReasonOf(err) != providers.ReasonBadTarget || providers.IsRetryable(err) {
		t.Fatalf("Fence error = %v (reason %s), want %s, not retryable", err, providers.ReasonOf(err), providers.ReasonBadTarget)
	}
	for _, want := range []string{"2 VMs", s.vm.Config.Uuid} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Fence error %q does not say %q", err, want)
		}
	}
	st, err := s.p.Check(context.Background(), s.req(1, false))
	if providers.ReasonOf(err) != providers.ReasonBadTarget || st.State == providers.Confirmed {
		t.Fatalf("Check = %+v, %v; want BadTarget, never Confirmed by the twin that is off", st, err)
	}
	if s.powerState() != types.VirtualMachinePowerStatePoweredOn || twin.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff {
		t.Errorf("the node's VM is %s and its twin %s; want both as they were", s.powerState(), twin.Runtime.PowerState)
	}
}

func TestTemplateTwinIsLeftOut(t *testing.T) {
	s := start(t)
	s.twin(t).Config.Template = true
	s.provider(t, s.providerID(), password, nil)
	if _, err := s.p.Fence(context.Background(), s.req(1, false)); err != nil {
		t.Fatal(err)
	}
	st, err := s.p.Check(context.Background(), s.req(1, false))
	if err != nil || st.State != providers.Confirmed || s.powerState() != types.VirtualMachinePowerStatePoweredOff {
		t.Fatalf("Check = %+v, %v, the node's VM %s; want Confirmed and poweredOff", st, err, s.powerState())
	}
}

func TestLoneTemplateConfirmsNothing(t *testing.T) {
	s := start(t)
	s.vm.Config.Template = true
	setPowerState(s.vm, types.VirtualMachinePowerStatePoweredOff)
	s.provider(t, s.providerID(), password, nil)
	st, err := s.p.Check(context.Background(), s.req(1, false))
	if providers.ReasonOf(err) != providers.ReasonBadTarget || st.State == providers.Confirmed {
		t.Fatalf("Check = %+v, %v; want BadTarget: a template runs no node", st, err)
	}
}

func TestHangingLogoutIsBounded(t *testing.T) {
	s := start(t)
	held := s.stallLogout(t)
	s.provider(t, s.providerID(), password, nil)
	type result struct {
		st  providers.Status
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := s.p.Check(context.Background(), s.req(1, false))
		done <- result{st, err}
	}()
	bound := vsphere.LogoutTimeout + 10*time.Second
	var r result
	select {
	case r = <-done:
	case <-time.After(bound):
		t.Fatalf("Check still waits after %s on a vCenter that hangs on Logout (%d Logout calls held)", bound, held.Load())
	}
	if n := held.Load(); n != 1 {
		t.Errorf("Logout calls held = %d, want 1", n)
	}
	if r.err != nil || r.st.State != providers.InProgress {
		t.Errorf("Check = %+v, %v; want InProgress: the power state was read before the logout hung", r.st, r.err)
	}
}

func TestParseProviderID(t *testing.T) {
	for id, ok := range map[string]bool{
		"vsphere://4237d7cd-5a59-f6b6-2c93-1b17b0dbb1e7":  true,
		"vsphere:///4237D7CD-5A59-F6B6-2C93-1B17B0DBB1E7": true,
		"vsphere://not-a-uuid":                            false,
		"aws:///us-east-1a/i-0123456789abcdef0":           false,
		"":                                                false,
	} {
		if _, err := vsphere.ParseProviderID(id); (err == nil) != ok {
			t.Errorf("ParseProviderID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}
