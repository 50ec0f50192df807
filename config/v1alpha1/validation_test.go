package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/test/testbed"
)

func validPolicy(name string) *v1alpha1.FencingPolicy {
	return &v1alpha1.FencingPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.FencingPolicySpec{
			Methods: []v1alpha1.Method{{Name: "ipmi", Type: v1alpha1.MethodIPMI,
				IPMI: &v1alpha1.IPMIMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "bmc"}}}},
		},
	}
}

// leveled is a chain of IPMI methods m0, m1, ... in the levels given ("": none).
func leveled(levels ...string) []v1alpha1.Method {
	var out []v1alpha1.Method
	for i, l := range levels {
		out = append(out, v1alpha1.Method{Name: fmt.Sprintf("m%d", i), Type: v1alpha1.MethodIPMI, Level: l,
			IPMI: &v1alpha1.IPMIMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "bmc"}}})
	}
	return out
}

// selfFence makes p's method a SelfFence with safeAfter, and timeout when not zero.
func selfFence(p *v1alpha1.FencingPolicy, safeAfter, timeout time.Duration) {
	m := &p.Spec.Methods[0]
	m.Type, m.IPMI = v1alpha1.MethodSelfFence, nil
	m.SelfFence = &v1alpha1.SelfFenceMethod{SafeAfter: metav1.Duration{Duration: safeAfter}}
	if timeout != 0 {
		m.Timeout = &metav1.Duration{Duration: timeout}
	}
}

// The API server itself refuses a bad FencingPolicy, with a message a person understands.
func TestFencingPolicyValidation(t *testing.T) {
	cluster := testbed.StartT(t, testbed.Options{})
	ctx := context.Background()
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	tests := []struct {
		name  string
		edit  func(*v1alpha1.FencingPolicy)
		wants []string // substrings of the error; none: accepted
	}{
		{"valid", func(*v1alpha1.FencingPolicy) {}, nil},
		{"valid with every field", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Detection.LeaseTimeout = &metav1.Duration{Duration: 20 * time.Second}
			p.Spec.StormGuard.MaxUnhealthy = pct("40%")
			p.Spec.Methods[0].Timeout = &metav1.Duration{Duration: time.Minute}
		}, nil},
		{"valid recovery", func(p *v1alpha1.FencingPolicy) {
			off := false
			p.Spec.Recovery = v1alpha1.Recovery{Automatic: &off, PowerOn: true, FlapWindow: &metav1.Duration{Duration: 30 * time.Minute}}
		}, nil},
		{"workloads", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Workloads = &v1alpha1.Workloads{RWOVolumes: true, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "data"}}}
		}, nil},
		{"workloads naming nothing", func(p *v1alpha1.FencingPolicy) { p.Spec.Workloads = &v1alpha1.Workloads{} },
			[]string{"workloads needs at least one of rwoVolumes, statefulSets, podSelector"}},
		{"recovery flap window off", func(p *v1alpha1.FencingPolicy) { p.Spec.Recovery.FlapWindow = &metav1.Duration{} }, nil},
		{"recovery flap window negative", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Recovery.FlapWindow = &metav1.Duration{Duration: -time.Minute}
		}, []string{"recovery.flapWindow must be between 0s and 168h"}},
		{"recovery flap window over a week", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Recovery.FlapWindow = &metav1.Duration{Duration: 169 * time.Hour}
		}, []string{"recovery.flapWindow must be between 0s and 168h"}},
		{"no methods", func(p *v1alpha1.FencingPolicy) { p.Spec.Methods = nil }, []string{"spec.methods"}},
		{"IPMI without its settings", func(p *v1alpha1.FencingPolicy) { p.Spec.Methods[0].IPMI = nil },
			[]string{"a method of type IPMI needs its ipmi settings"}},
		{"Redfish without its settings", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodRedfish, nil
		},
			[]string{"a method of type Redfish needs its redfish settings"}},
		{"VSphere without its settings", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodVSphere, nil
		},
			[]string{"a method of type VSphere needs its vsphere settings"}},
		{"AWS with defaults only", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodAWS, nil
		}, nil},
		{"AWS with a malformed region", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodAWS, nil
			p.Spec.Methods[0].AWS = &v1alpha1.AWSMethod{Region: "US East"}
		}, []string{"spec.methods[0].aws.region"}},
		{"AWS with an endpoint that is no URL", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodAWS, nil
			p.Spec.Methods[0].AWS = &v1alpha1.AWSMethod{Endpoint: "ec2.internal"}
		}, []string{"spec.methods[0].aws.endpoint"}},
		{"VSphere without a server", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodVSphere, nil
			p.Spec.Methods[0].VSphere = &v1alpha1.VSphereMethod{CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "ns", Name: "vc"}}
		}, []string{"spec.methods[0].vsphere.server"}},
		{"NetworkFence without its settings", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodNetworkFence, nil
		}, []string{"a method of type NetworkFence needs its networkFence settings"}},
		{"NetworkFence without a class", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodNetworkFence, nil
			p.Spec.Methods[0].NetworkFence = &v1alpha1.NetworkFenceMethod{}
		}, []string{"spec.methods[0].networkFence.networkFenceClassName"}},
		{"StorageGateway without its settings", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodStorageGateway, nil
		}, []string{"a method of type StorageGateway needs its storageGateway settings"}},
		{"StorageGateway without gateways", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodStorageGateway, nil
			p.Spec.Methods[0].StorageGateway = &v1alpha1.StorageGatewayMethod{TLSSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "gw"}}
		}, []string{"spec.methods[0].storageGateway.gateways"}},
		{"StorageGateway", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodStorageGateway, nil
			p.Spec.Methods[0].StorageGateway = &v1alpha1.StorageGatewayMethod{Gateways: []string{"10.0.9.1:9446"},
				TLSSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "gw"}}
		}, nil},
		{"StorageGateway without a port", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodStorageGateway, nil
			p.Spec.Methods[0].StorageGateway = &v1alpha1.StorageGatewayMethod{Gateways: []string{"gw.example.com:9446", "10.0.9.1"},
				TLSSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "gw"}}
		}, []string{"spec.methods[0].storageGateway.gateways[1]"}},
		{"StorageGateway on IPv6", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodStorageGateway, nil
			p.Spec.Methods[0].StorageGateway = &v1alpha1.StorageGatewayMethod{Gateways: []string{"[fd00::9]:9446"},
				TLSSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "gw"}}
		}, nil},
		{"a Secret name no Secret has", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].IPMI.CredentialsSecretRef.Name = "BMC_Creds"
		}, []string{"spec.methods[0].ipmi.credentialsSecretRef.name"}},
		{"a Secret namespace no namespace has", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].IPMI.CredentialsSecretRef.Namespace = "palisade.system"
		}, []string{"spec.methods[0].ipmi.credentialsSecretRef.namespace"}},
		{"vSphere server with a scheme", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodVSphere, nil
			p.Spec.Methods[0].VSphere = &v1alpha1.VSphereMethod{Server: "https://vc", CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "vc"}}
		}, []string{"spec.methods[0].vsphere.server"}},
		{"vSphere server host, host:port, IPv6", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods = nil
			for i, server := range []string{"vc.example.com", "vc.example.com:8443", "[fd00::1]:443", "fd00::1"} {
				p.Spec.Methods = append(p.Spec.Methods, v1alpha1.Method{Name: fmt.Sprintf("vc%d", i), Type: v1alpha1.MethodVSphere,
					VSphere: &v1alpha1.VSphereMethod{Server: server, CredentialsSecretRef: v1alpha1.SecretReference{Namespace: "palisade-system", Name: "vc"}}})
			}
		}, nil},
		{"NetworkFence and IPMI all-of", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Level = "storage-and-power"
			p.Spec.Methods = append([]v1alpha1.Method{{Name: "storage", Type: v1alpha1.MethodNetworkFence, Level: "storage-and-power",
				NetworkFence: &v1alpha1.NetworkFenceMethod{NetworkFenceClassName: "ceph-rbd"}}}, p.Spec.Methods...)
		}, nil},
		{"unknown method type", func(p *v1alpha1.FencingPolicy) { p.Spec.Methods[0].Type = "Telepathy" },
			[]string{`Unsupported value: "Telepathy"`}},
		{"duplicate method names", func(p *v1alpha1.FencingPolicy) { p.Spec.Methods = append(p.Spec.Methods, p.Spec.Methods[0]) },
			[]string{"every method needs a unique name"}},
		{"bad method name", func(p *v1alpha1.FencingPolicy) { p.Spec.Methods[0].Name = "Power Off!" },
			[]string{"spec.methods[0].name"}},
		{"levels", func(p *v1alpha1.FencingPolicy) { p.Spec.Methods = leveled("a", "a", "", "b", "b") }, nil},
		// A level is taken where its first method is listed (the controller orders the fence's
		// methods so): its methods need not be listed together.
		{"a level split by another method", func(p *v1alpha1.FencingPolicy) { p.Spec.Methods = leveled("a", "", "a") }, nil},
		{"bad level name", func(p *v1alpha1.FencingPolicy) { p.Spec.Methods = leveled("Storage AND power") },
			[]string{"spec.methods[0].level"}},
		{"lease timeout too short", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Detection.LeaseTimeout = &metav1.Duration{Duration: time.Second}
		}, []string{"spec.detection.leaseTimeout must be at least 2s"}},
		{"heartbeat interval too short", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Detection.HeartbeatInterval = &metav1.Duration{Duration: 10 * time.Millisecond}
		}, []string{"detection.heartbeatInterval must be between 100ms and 1m"}},
		{"heartbeat interval too long", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Detection.HeartbeatInterval = &metav1.Duration{Duration: 2 * time.Minute}
		}, []string{"detection.heartbeatInterval must be between 100ms and 1m"}},
		{"heartbeat interval in range", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Detection.HeartbeatInterval = &metav1.Duration{Duration: 500 * time.Millisecond}
		}, nil},
		{"method timeout too long", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Timeout = &metav1.Duration{Duration: time.Hour}
		}, []string{"a method's timeout must be between 1s and 30m"}},
		{"SelfFence without its settings", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Methods[0].Type, p.Spec.Methods[0].IPMI = v1alpha1.MethodSelfFence, nil
		}, []string{"a method of type SelfFence needs selfFence.safeAfter"}},
		{"SelfFence safe after under 1s", func(p *v1alpha1.FencingPolicy) {
			selfFence(p, 500*time.Millisecond, 0)
		}, []string{"selfFence.safeAfter must be at least 1s"}},
		{"SelfFence within the default timeout", func(p *v1alpha1.FencingPolicy) { selfFence(p, 45*time.Second, 0) }, nil},
		{"SelfFence safe after equal to the default timeout", func(p *v1alpha1.FencingPolicy) {
			selfFence(p, time.Minute, 0)
		}, []string{"a SelfFence method's timeout (default 60s, counted from the wait's start) must exceed selfFence.safeAfter"}},
		{"SelfFence safe after beyond the default timeout", func(p *v1alpha1.FencingPolicy) {
			selfFence(p, 90*time.Second, 0)
		}, []string{"must exceed selfFence.safeAfter", "raise timeout or lower safeAfter"}},
		{"SelfFence within its own timeout", func(p *v1alpha1.FencingPolicy) { selfFence(p, 90*time.Second, 3*time.Minute) }, nil},
		{"SelfFence beyond its own timeout", func(p *v1alpha1.FencingPolicy) {
			selfFence(p, 90*time.Second, 80*time.Second)
		}, []string{"must exceed selfFence.safeAfter"}},
		{"node selector with every operator", func(p *v1alpha1.FencingPolicy) {
			p.Spec.NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{
				{Key: "a", Operator: metav1.LabelSelectorOpIn, Values: []string{"x"}}, {Key: "b", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"y", "z"}},
				{Key: "c", Operator: metav1.LabelSelectorOpExists}, {Key: "d", Operator: metav1.LabelSelectorOpDoesNotExist}}
		}, nil},
		{"node selector with an unknown operator", func(p *v1alpha1.FencingPolicy) {
			p.Spec.NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Equals", Values: []string{"x"}}}
		}, []string{"spec.nodeSelector.matchExpressions: each operator must be In or NotIn with at least one value"}},
		{"node selector In without values", func(p *v1alpha1.FencingPolicy) {
			p.Spec.NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: metav1.LabelSelectorOpIn}}
		}, []string{"spec.nodeSelector.matchExpressions"}},
		{"node selector Exists with values", func(p *v1alpha1.FencingPolicy) {
			p.Spec.NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: metav1.LabelSelectorOpExists, Values: []string{"x"}}}
		}, []string{"spec.nodeSelector.matchExpressions"}},
		{"pod selector with an unknown operator", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Workloads = &v1alpha1.Workloads{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "exists"}}}}
		}, []string{"workloads.podSelector.matchExpressions: each operator must be"}},
		{"pod selector DoesNotExist", func(p *v1alpha1.FencingPolicy) {
			p.Spec.Workloads = &v1alpha1.Workloads{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "DoesNotExist"}}}}
		}, nil},
		{"SelfFence timeout only just above safe after", func(p *v1alpha1.FencingPolicy) {
			selfFence(p, 90*time.Second, 91*time.Second)
		}, nil},
		{"storm guard over 100%", func(p *v1alpha1.FencingPolicy) { p.Spec.StormGuard.MaxUnhealthy = pct("150%") },
			[]string{"spec.stormGuard.maxUnhealthy must be a count (0 to 1000000) or a percentage from 0% to 100%"}},
		{"storm guard not a percentage", func(p *v1alpha1.FencingPolicy) { p.Spec.StormGuard.MaxUnhealthy = pct("many") },
			[]string{"spec.stormGuard.maxUnhealthy must be a count"}},
		{"negative storm guard", func(p *v1alpha1.FencingPolicy) { v := intstr.FromInt32(-1); p.Spec.StormGuard.MaxUnhealthy = &v },
			[]string{"spec.stormGuard.maxUnhealthy must be a count"}},
		{"storm guard count at its bound", func(p *v1alpha1.FencingPolicy) { v := intstr.FromInt32(1000000); p.Spec.StormGuard.MaxUnhealthy = &v }, nil},
		{"storm guard count over its bound", func(p *v1alpha1.FencingPolicy) { v := intstr.FromInt32(1000001); p.Spec.StormGuard.MaxUnhealthy = &v },
			[]string{"spec.stormGuard.maxUnhealthy must be a count (0 to 1000000)"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := validPolicy(fmt.Sprintf("p%d", i))
			tt.edit(p)
			err := cluster.Client.Create(ctx, p)
			if len(tt.wants) == 0 {
				if err != nil {
					t.Fatalf("valid policy refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("bad policy accepted")
			}
			for _, want := range tt.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}

	// A count beyond 32 bits, which no typed client can write: the controller could not read
	// the policy, nor then any policy of the list.
	t.Run("storm guard count beyond 32 bits", func(t *testing.T) {
		p := validPolicy("p-huge")
		raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: raw}
		u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("FencingPolicy"))
		if err := unstructured.SetNestedField(u.Object, int64(3000000000), "spec", "stormGuard", "maxUnhealthy"); err != nil {
			t.Fatal(err)
		}
		err = cluster.Client.Create(ctx, u)
		if err == nil || !strings.Contains(err.Error(), "spec.stormGuard.maxUnhealthy must be a count (0 to 1000000)") {
			t.Fatalf("a count of 3000000000: error %v, want the storm guard's bound", err)
		}
	})
}

// A NodeFence's node cannot be changed once set.
func TestNodeFenceNodeIsImmutable(t *testing.T) {
	cluster := testbed.StartT(t, testbed.Options{})
	ctx := context.Background()
	nf := &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1alpha1.NodeFenceSpec{
		NodeName: "n1", Trigger: v1alpha1.TriggerManual, Methods: validPolicy("x").Spec.Methods}}
	if err := cluster.Client.Create(ctx, nf); err != nil {
		t.Fatal(err)
	}
	nf.Spec.NodeName = "n2"
	err := cluster.Client.Update(ctx, nf)
	if err == nil || !strings.Contains(err.Error(), "spec.nodeName cannot be changed") {
		t.Errorf("changing spec.nodeName: err = %v, want refusal", err)
	}
}

// A NodeFence is named after its node, and its spec is fixed once it is created: the API server
// refuses a fence named for one node that fences another (two fences for one node, or a node
// deletion let go on another node's fence), and an edit of a fence under way (a method taken
// out of a level, a dry run switched on), which would release on a chain it never confirmed.
func TestNodeFenceNamedAfterItsNodeAndFixed(t *testing.T) {
	cluster := testbed.StartT(t, testbed.Options{})
	ctx := context.Background()
	fence := func(name, node string) *v1alpha1.NodeFence {
		return &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.NodeFenceSpec{
			NodeName: node, Trigger: v1alpha1.TriggerManual, Methods: leveled("", "")}}
	}
	if err := cluster.Client.Create(ctx, fence("x", "n1")); err == nil || !strings.Contains(err.Error(), "metadata.name must equal spec.nodeName") {
		t.Errorf("creating NodeFence x for node n1: err = %v, want refusal", err)
	}
	// Its steps name their method: two methods of one name (a NodeFence made by hand; a policy
	// cannot have them) are refused, as are more methods than a policy holds.
	twice := fence("n2", "n2")
	twice.Spec.Methods[1].Name = twice.Spec.Methods[0].Name
	if err := cluster.Client.Create(ctx, twice); err == nil || !strings.Contains(err.Error(), "every method needs a unique name") {
		t.Errorf("creating a NodeFence with a method named twice: err = %v, want refusal", err)
	}
	many := fence("n3", "n3")
	for i := range 9 {
		m := many.Spec.Methods[0]
		m.Name = fmt.Sprintf("m%d", i)
		many.Spec.Methods = append(many.Spec.Methods, m)
	}
	if err := cluster.Client.Create(ctx, many); err == nil || !strings.Contains(err.Error(), "must have at most 8 items") {
		t.Errorf("creating a NodeFence with %d methods: err = %v, want refusal", len(many.Spec.Methods), err)
	}
	nf := fence("n1", "n1")
	if err := cluster.Client.Create(ctx, nf); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*v1alpha1.NodeFenceSpec){
		"a method taken out":  func(s *v1alpha1.NodeFenceSpec) { s.Methods = s.Methods[:1] },
		"dry run switched on": func(s *v1alpha1.NodeFenceSpec) { s.DryRun = true },
		"reason rewritten":    func(s *v1alpha1.NodeFenceSpec) { s.Reason = "edited" },
	} {
		changed := nf.DeepCopy()
		edit(&changed.Spec)
		if err := cluster.Client.Update(ctx, changed); err == nil || !strings.Contains(err.Error(), "spec is fixed when the fence is created") {
			t.Errorf("%s: err = %v, want refusal", name, err)
		}
	}
	// The controller and the agents write the status, annotations and finalizers: those stay free.
	nf.Annotations = map[string]string{"palisade.dev/example": "x"}
	if err := cluster.Client.Update(ctx, nf); err != nil {
		t.Errorf("annotating the NodeFence: %v", err)
	}
}
