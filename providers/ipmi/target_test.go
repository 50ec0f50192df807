package ipmi

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

// The provider finds the BMC from the Node's annotations and the method's (or the node's
// own) Secret; anything missing is BadTarget with a hint, never a retry.
func TestTarget(t *testing.T) {
	// The nodes report no systemUUID: the BMC cannot be checked against it.
	const noUUID = `node n1 reports systemUUID "", which is no SMBIOS UUID a BMC could tell (none, a placeholder, or a machine-id)`
	secret := func(name string, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "palisade-system", Name: name}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	node := func(annotations map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: annotations}}
	}
	addr := map[string]string{v1alpha1.AnnotationBMCAddress: "10.0.0.1:6230"}
	own := map[string]string{v1alpha1.AnnotationBMCAddress: "10.0.0.1", v1alpha1.AnnotationBMCSecret: "bmc-n1"}
	ipmiSettings := &v1alpha1.IPMIMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "bmc"}, CipherSuite: ptr.To[int32](17)}
	good := secret("bmc", map[string]string{"username": "admin", "password": "pw"})
	tests := []struct {
		name     string
		objs     []client.Object
		settings *v1alpha1.IPMIMethod
		want     Target
		wantErr  providers.Reason
	}{
		{"annotation and the method's Secret", []client.Object{node(addr), good}, ipmiSettings,
			Target{Node: "n1", Address: "10.0.0.1:6230", Username: "admin", Password: "pw", CipherSuite: "17", Unidentified: noUUID}, ""},
		{"the node's own Secret", []client.Object{node(own), good, secret("bmc-n1", map[string]string{"username": "root", "password": "x"})}, ipmiSettings,
			Target{Node: "n1", Address: "10.0.0.1", Username: "root", Password: "x", CipherSuite: "17", Unidentified: noUUID}, ""},
		{"no ipmi settings", []client.Object{node(addr), good}, nil, Target{}, providers.ReasonBadTarget},
		{"no address annotation", []client.Object{node(nil), good}, ipmiSettings, Target{}, providers.ReasonBadTarget},
		{"no Secret", []client.Object{node(addr)}, ipmiSettings, Target{}, providers.ReasonBadTarget},
		{"Secret without a password", []client.Object{node(addr), secret("bmc", map[string]string{"username": "admin"})}, ipmiSettings, Target{}, providers.ReasonBadTarget},
		{"no node", []client.Object{good}, ipmiSettings, Target{}, providers.ReasonBadTarget},
	}
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeclient.NewClientBuilder().WithScheme(s).WithObjects(tt.objs...).Build()
			req := providers.Request{Fence: &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"}},
				Method: v1alpha1.Method{Name: "ipmi", Type: v1alpha1.MethodIPMI, IPMI: tt.settings}}
			got, err := New(c).target(context.Background(), req)
			if tt.wantErr != "" {
				if providers.ReasonOf(err) != tt.wantErr {
					t.Fatalf("error %v, want reason %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("target (-want +got):\n%s", diff)
			}
		})
	}
}

// A BadTarget error from Fence carries the hint that says what to fix.
func TestFenceHint(t *testing.T) {
	req := providers.Request{Fence: &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"}}, Method: v1alpha1.Method{Name: "ipmi"}}
	_, err := New(nil).Fence(context.Background(), req)
	if providers.ReasonOf(err) != providers.ReasonBadTarget || providers.HintOf(err) != hints[providers.ReasonBadTarget] || providers.IsRetryable(err) {
		t.Errorf("Fence without settings = %v (hint %q), want a non-retryable BadTarget with its hint", err, providers.HintOf(err))
	}
}

// RestorePower (recovery.powerOn) powers the real BMC's machine back on, found through the
// Node and the Secret like the fence; with no BMC for the node it is BadTarget and changes
// nothing.
func TestRestorePower(t *testing.T) {
	b := startBMC(t)
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{v1alpha1.AnnotationBMCAddress: b.Address()}}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "palisade-system", Name: "bmc"},
		Data: map[string][]byte{"username": []byte(b.Username()), "password": []byte(b.Password())}}
	c := fakeclient.NewClientBuilder().WithScheme(s).WithObjects(node, secret).Build()
	p := New(c)
	req := providers.Request{Fence: &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "n1"}}, Method: v1alpha1.Method{Name: "ipmi",
		IPMI: &v1alpha1.IPMIMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "bmc"}}}}
	if _, err := p.Fence(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if poweredOn(t, b) {
		t.Fatal("the fence left the machine on")
	}
	if err := p.RestorePower(context.Background(), req); err != nil {
		t.Fatalf("RestorePower: %v", err)
	}
	if !poweredOn(t, b) {
		t.Error("RestorePower left the machine off")
	}
	if err := b.SetPower(false); err != nil {
		t.Fatal(err)
	}
	other := req
	other.Fence = &v1alpha1.NodeFence{Spec: v1alpha1.NodeFenceSpec{NodeName: "n2"}}
	wantReason(t, p.RestorePower(context.Background(), other), providers.ReasonBadTarget)
	if poweredOn(t, b) {
		t.Error("RestorePower of another node powered this machine on")
	}
}
