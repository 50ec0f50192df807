package fencing

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

func TestInsecureTLSCondition(t *testing.T) {
	redfish := func(name string, insecure bool) v1alpha1.Method {
		return v1alpha1.Method{Name: name, Type: v1alpha1.MethodRedfish, Redfish: &v1alpha1.RedfishMethod{InsecureSkipVerify: insecure}}
	}
	tests := []struct {
		name    string
		methods []v1alpha1.Method
		want    metav1.ConditionStatus // "": no condition
		names   []string
	}{
		{"verified", []v1alpha1.Method{redfish("rf", false), {Name: "ipmi", Type: v1alpha1.MethodIPMI}}, metav1.ConditionFalse, nil},
		{"one insecure", []v1alpha1.Method{redfish("rf-a", false), redfish("rf-b", true)}, metav1.ConditionTrue, []string{"rf-b"}},
		{"no method talks TLS", []v1alpha1.Method{{Name: "ipmi", Type: v1alpha1.MethodIPMI}}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ok := insecureTLSCondition(&v1alpha1.FencingPolicy{Spec: v1alpha1.FencingPolicySpec{Methods: tt.methods}})
			if ok != (tt.want != "") {
				t.Fatalf("condition present = %v, want %v", ok, tt.want != "")
			}
			if !ok {
				return
			}
			if c.Status != tt.want || c.Type != v1alpha1.ConditionInsecureTLS {
				t.Fatalf("condition = %+v, want %s", c, tt.want)
			}
			for _, n := range tt.names {
				if !strings.Contains(c.Message, n) || !strings.Contains(c.Message, "caBundleSecretRef") {
					t.Errorf("message %q should name method %s and what to do", c.Message, n)
				}
			}
			if tt.want == metav1.ConditionFalse && strings.Contains(c.Message, "rf-a") {
				t.Errorf("message %q names a verifying method", c.Message)
			}
		})
	}
}
