package networkfence

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

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
