package networkfence

import (
	"context"
	"slices"
	"strings"
	"testing"

	csiaddonsv1alpha1 "github.com/csi-addons/kubernetes-csi-addons/api/csiaddons/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
	"palisade.dev/palisade/providers"
)

func TestParseCIDRs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string // substring of the error; "" for none
	}{
		{"10.20.0.5/32", []string{"10.20.0.5/32"}, ""},
		{" 10.20.0.0/24 , fd00:20::5/128,10.20.0.0/24", []string{"10.20.0.0/24", "fd00:20::5/128"}, ""},
		{"10.20.0.5/24", nil, "did you mean 10.20.0.0/24, or 10.20.0.5/32?"},
		{"10.20.0.5", nil, `"10.20.0.5" is not a CIDR`},
		{"storage-net", nil, "is not a CIDR"},
		{" , ", nil, "lists no CIDR"},
		{"fd00:20::/64", []string{"fd00:20::/64"}, ""},
		// Whole networks: a storage fence of one cuts every machine in it off its storage.
		{"0.0.0.0/0", nil, `"0.0.0.0/0" is wider than a /24`},
		{"::/0", nil, `"::/0" is wider than a /64`},
		{"10.20.0.5/32,10.0.0.0/8", nil, `"10.0.0.0/8" is wider than a /24`},
		{"10.20.0.0/23", nil, "List the node's own addresses on the storage network"},
		{"fd00:20::/48", nil, `"fd00:20::/48" is wider than a /64`},
		{"::ffff:10.20.0.0/120", nil, "an IPv4 network written as IPv6"},
		{"", nil, "lists no CIDR"},
	} {
		got, err := ParseCIDRs(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("ParseCIDRs(%q): %v", tc.in, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseCIDRs(%q) = %v, %v; want an error saying %q", tc.in, got, err, tc.err)
		case !slices.Equal(got, tc.want):
			t.Errorf("ParseCIDRs(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestObjectName: one NetworkFence per fence and method, named after the node when that makes
// a valid name, after the fence's UID otherwise.
func TestObjectName(t *testing.T) {
	req := func(node, method string) providers.Request {
		return providers.Request{Fence: &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "0123456789abcdef-x"},
			Spec: v1alpha1.NodeFenceSpec{NodeName: node}}, Method: v1alpha1.Method{Name: method}}
	}
	a := ObjectName(req("node-1", "storage"))
	if a != "palisade-node-1-storage-01234567" {
		t.Errorf("ObjectName = %q", a)
	}
	if b := ObjectName(req("node-1", "nfs")); b == a {
		t.Errorf("two methods share NetworkFence %s", a)
	}
	long := strings.Repeat("n", 250)
	got := ObjectName(req(long, "storage"))
	if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 || !strings.Contains(got, "0123456789abcdef") {
		t.Errorf("ObjectName of a %d-character node = %q (%v)", len(long), got, errs)
	}
}

// node is a Node with the annotation palisade.dev/storage-cidrs (none when cidrs is "-") and the
// addresses given, alternately type and address.
func node(name, cidrs string, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if cidrs != "-" {
		n.Annotations = map[string]string{v1alpha1.AnnotationStorageCIDRs: cidrs}
	}
	for i := 0; i+1 < len(addrs); i += 2 {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeAddressType(addrs[i]), Address: addrs[i+1]})
	}
	return n
}

// TestFenceSparesOtherNodes: a storage fence whose CIDRs hold an address of another Node of the
// cluster (its InternalIP, its ExternalIP, a CIDR of its own storage-cidrs), whether they come
// from the annotation or from the node's own addresses, is a Failed BadTarget that names the
// other node and its address and says what to write; no NetworkFence is created. Without the
// check the storage would refuse those healthy nodes too until the NodeFence is deleted.
func TestFenceSparesOtherNodes(t *testing.T) {
	others := []client.Object{
		node("db-2", "-", "InternalIP", "10.20.0.6", "Hostname", "db-2"),
		node("db-3", "-", "InternalIP", "10.30.0.7", "ExternalIP", "203.0.113.9"),
		node("db-4", "192.168.50.8/32", "InternalIP", "10.30.0.8"),
		node("db-5", "-", "InternalIP", "fd00:20::6"),
		node("db-6", "172.99.0.5/24", "InternalIP", "10.40.0.9"), // malformed (host bits): its own fence says so; this one spares 172.99.0.0/24
		node("db-7", "10.60.0.6", "InternalIP", "10.40.0.10"),    // malformed (a bare address): spared as 10.60.0.6/32
	}
	unreadable := node("db-8", "10.70.0.6/33,storage", "InternalIP", "10.40.0.11")
	tooWide := node("db-9", "10.0.0.5/0", "InternalIP", "10.40.0.12") // a typo naming every address
	for _, tc := range []struct {
		name  string
		db1   *corev1.Node
		says  []string      // nil: fenced
		extra client.Object // another node, for this case alone
	}{
		{"another node's InternalIP as a /32", node("db-1", "10.20.0.6/32"), []string{"10.20.0.6/32 (from its annotation palisade.dev/storage-cidrs) holds 10.20.0.6, the InternalIP of node db-2"}, nil},
		{"a network holding another node's InternalIP", node("db-1", "10.20.0.5/32,10.20.0.0/24"), []string{"10.20.0.0/24", "holds 10.20.0.6, the InternalIP of node db-2", "cut node db-2 off its storage"}, nil},
		{"another node's ExternalIP", node("db-1", "203.0.113.9/32"), []string{"holds 203.0.113.9, the ExternalIP of node db-3"}, nil},
		{"another node's storage-cidrs", node("db-1", "192.168.50.0/24"), []string{"overlaps 192.168.50.8/32, which node db-4 lists as its own"}, nil},
		{"an IPv6 network holding another node's address", node("db-1", "fd00:20::/64"), []string{"holds fd00:20::6, the InternalIP of node db-5"}, nil},
		{"its own InternalIP is another node's", node("db-1", "-", "InternalIP", "10.20.0.6"), []string{"(from its InternalIP and ExternalIP addresses) holds 10.20.0.6, the InternalIP of node db-2"}, nil},
		{"a network holding another node's malformed (host bits) CIDR", node("db-1", "172.99.0.128/25"), []string{"overlaps 172.99.0.0/24, which node db-6 lists as its own"}, nil},
		{"a network, while another node's list is wider than a node's network", node("db-1", "10.80.0.0/24"), []string{"may cover the storage addresses of node db-9", `"10.0.0.5/0"`}, tooWide},
		{"its own address, while another node's list is wider than a node's network", node("db-1", "10.80.0.5/32"), nil, tooWide},
		{"a network holding another node's bare address", node("db-1", "10.60.0.0/24"), []string{"overlaps 10.60.0.6/32, which node db-7 lists as its own"}, nil},
		{"a network, while another node's list holds no address", node("db-1", "10.80.0.0/24"), []string{"may cover the storage addresses of node db-8", `"10.70.0.6/33"`, "Fix that annotation"}, unreadable},
		{"its own address, while another node's list holds no address", node("db-1", "10.80.0.5/32"), nil, unreadable},
		{"its own addresses", node("db-1", "-", "InternalIP", "10.20.0.5", "ExternalIP", "203.0.113.5"), nil, nil},
		{"its own network", node("db-1", "10.50.0.0/24,fd00:50::5/128"), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := append(slices.Clone(others), tc.db1, &csiaddonsv1alpha1.NetworkFenceClass{ObjectMeta: metav1.ObjectMeta{Name: "storage"}})
			if tc.extra != nil {
				objs = append(objs, tc.extra)
			}
			c := fake.NewClientBuilder().WithScheme(csiScheme(t)).WithObjects(objs...).Build()
			p := New(c, c)
			req := providers.Request{Fence: &v1alpha1.NodeFence{ObjectMeta: metav1.ObjectMeta{Name: "db-1", UID: "uid-1"}, Spec: v1alpha1.NodeFenceSpec{NodeName: "db-1"}},
				Method: v1alpha1.Method{Name: "storage", Type: v1alpha1.MethodNetworkFence, NetworkFence: &v1alpha1.NetworkFenceMethod{NetworkFenceClassName: "storage"}}}
			st, err := p.Fence(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			list := &csiaddonsv1alpha1.NetworkFenceList{}
			if err := c.List(context.Background(), list); err != nil {
				t.Fatal(err)
			}
			if tc.says == nil {
				if st.State != providers.InProgress || len(list.Items) != 1 {
					t.Errorf("Fence = %+v with %d NetworkFences; want InProgress, one NetworkFence", st, len(list.Items))
				}
				return
			}
			if st.State != providers.Failed || st.Reason != providers.ReasonBadTarget {
				t.Errorf("Fence = %+v; want Failed %s", st, providers.ReasonBadTarget)
			}
			for _, w := range append(tc.says, "List in node db-1's annotation palisade.dev/storage-cidrs only its own addresses", "delete this NodeFence") {
				if !strings.Contains(st.Message, w) {
					t.Errorf("Fence's message %q does not say %q", st.Message, w)
				}
			}
			if len(list.Items) != 0 {
				t.Errorf("%d NetworkFences created for a fence that would cut other nodes off; want none", len(list.Items))
			}
		})
	}
}

func csiScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, csiaddonsv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}
