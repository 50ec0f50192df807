package v1alpha1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

func TestWorkloadsDescribe(t *testing.T) {
	data := &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "data"}}
	tests := []struct {
		name string
		w    *v1alpha1.Workloads
		want string
	}{
		{"none", nil, "every pod a fence would delete"},
		{"rwoVolumes", &v1alpha1.Workloads{RWOVolumes: true}, "pods on ReadWriteOnce volumes"},
		{"statefulSets", &v1alpha1.Workloads{StatefulSets: true}, "StatefulSet pods"},
		{"podSelector", &v1alpha1.Workloads{PodSelector: data}, "pods matching tier=data"},
		{"two", &v1alpha1.Workloads{RWOVolumes: true, StatefulSets: true}, "pods on ReadWriteOnce volumes or StatefulSet pods"},
		{"all three", &v1alpha1.Workloads{RWOVolumes: true, StatefulSets: true, PodSelector: data},
			"pods on ReadWriteOnce volumes, StatefulSet pods or pods matching tier=data"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.w.Describe(); got != tc.want {
				t.Errorf("Describe() = %q, want %q", got, tc.want)
			}
		})
	}
}
