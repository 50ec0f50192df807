package v1alpha1_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

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

// pod is a running pod of namespace db, owned by kind of apiVersion (none when kind is ""),
// with claims.
func pod(name, apiVersion, kind string, labels map[string]string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if kind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "db", UID: "owner", Controller: ptr.To(true)}}
	}
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return p
}

// The rule the controller fences by and the CLI explains by, pod by pod.
func TestWorkloadRule(t *testing.T) {
	all := &v1alpha1.Workloads{RWOVolumes: true, StatefulSets: true,
		PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "data"}}}
	rwo := &v1alpha1.Workloads{RWOVolumes: true}
	stateful := &v1alpha1.Workloads{StatefulSets: true}
	claims := map[string][]corev1.PersistentVolumeAccessMode{
		"db/data-0":  {corev1.ReadWriteOnce},
		"db/data-1":  {corev1.ReadWriteOncePod},
		"db/shared":  {corev1.ReadWriteMany, corev1.ReadWriteOnce},
		"db/nomodes": nil,
	}
	read := func(namespace, name string) ([]corev1.PersistentVolumeAccessMode, error) {
		if name == "locked" {
			return nil, errors.New("forbidden")
		}
		modes, ok := claims[namespace+"/"+name]
		if !ok {
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumeclaims"}, name)
		}
		return modes, nil
	}
	with := func(p *corev1.Pod, edit func(*corev1.Pod)) *corev1.Pod { edit(p); return p }
	tests := []struct {
		name    string
		w       *v1alpha1.Workloads
		pod     *corev1.Pod
		want    v1alpha1.FenceNeed
		why     string
		wantErr string
	}{
		{"no workloads: any running pod", nil, pod("web-1", "apps/v1", "ReplicaSet", nil),
			v1alpha1.FenceNeed{Any: true}, "a pod the fence would delete (the policy names no workloads)", ""},
		{"no workloads: a finished pod needs none", nil, with(pod("job-1", "", "", nil), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
			v1alpha1.FenceNeed{}, "needs no fence", ""},
		{"a failed pod needs none", all, with(pod("db-0", "apps/v1", "StatefulSet", nil), func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
			v1alpha1.FenceNeed{}, "needs no fence", ""},
		{"a pod tolerating out-of-service needs none", all, with(pod("db-0", "apps/v1", "StatefulSet", nil), func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: v1alpha1.TaintOutOfService, Operator: corev1.TolerationOpExists}}
		}), v1alpha1.FenceNeed{}, "needs no fence", ""},
		{"a StatefulSet's pod", stateful, pod("db-0", "apps/v1", "StatefulSet", nil), v1alpha1.FenceNeed{StatefulSet: true}, "StatefulSet pod", ""},
		{"a ReplicaSet's pod", stateful, pod("web-1", "apps/v1", "ReplicaSet", nil), v1alpha1.FenceNeed{}, "needs no fence", ""},
		{"another group's StatefulSet", stateful, pod("x-0", "example.com/v1", "StatefulSet", nil), v1alpha1.FenceNeed{}, "needs no fence", ""},
		{"a StatefulSet's pod, statefulSets off", rwo, pod("db-0", "apps/v1", "StatefulSet", nil), v1alpha1.FenceNeed{}, "needs no fence", ""},
		{"selected", all, pod("cache-1", "", "", map[string]string{"tier": "data"}), v1alpha1.FenceNeed{Selector: "tier=data"}, "pod matching tier=data", ""},
		{"a ReadWriteOnce claim", rwo, pod("db-0", "", "", nil, "data-0"), v1alpha1.FenceNeed{RWOClaims: []string{"data-0"}},
			"pod with ReadWriteOnce volume data-0", ""},
		{"every reason at once", all, pod("db-0", "apps/v1", "StatefulSet", map[string]string{"tier": "data"}, "data-0", "shared", "data-1"),
			v1alpha1.FenceNeed{StatefulSet: true, Selector: "tier=data", RWOClaims: []string{"data-0", "data-1"}},
			"StatefulSet pod matching tier=data with ReadWriteOnce volumes data-0, data-1", ""},
		{"a claim also ReadWriteMany is shared", rwo, pod("db-0", "", "", nil, "shared", "nomodes"), v1alpha1.FenceNeed{}, "needs no fence", ""},
		{"a claim that does not exist", rwo, pod("db-0", "", "", nil, "gone"), v1alpha1.FenceNeed{}, "needs no fence", ""},
		{"a generic ephemeral volume", rwo, with(pod("db-0", "", "", nil), func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
				VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}}}}}
		}), v1alpha1.FenceNeed{RWOClaims: []string{"db-0-scratch"}}, "pod with ReadWriteOnce volume db-0-scratch", ""},
		{"an unreadable claim decides nothing", rwo, pod("db-0", "", "", nil, "locked"), v1alpha1.FenceNeed{}, "",
			"reading claim db/locked of pod db-0: forbidden"},
		{"an unreadable claim of a pod that needs the fence anyway", all, pod("db-0", "apps/v1", "StatefulSet", nil, "locked", "data-0"),
			v1alpha1.FenceNeed{StatefulSet: true, RWOClaims: []string{"data-0"}}, "StatefulSet pod with ReadWriteOnce volume data-0", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rule, err := v1alpha1.NewWorkloadRule(tc.w)
			if err != nil {
				t.Fatal(err)
			}
			got, err := rule.NeedsFence(tc.pod, read)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("NeedsFence (-want +got):\n%s", diff)
			}
			if got.Needed() != (tc.why != "needs no fence") {
				t.Errorf("Needed() = %v for %+v", got.Needed(), got)
			}
			if s := got.String(); s != tc.why {
				t.Errorf("String() = %q, want %q", s, tc.why)
			}
		})
	}

	t.Run("an invalid podSelector", func(t *testing.T) {
		bad := &v1alpha1.Workloads{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Is"}}}}
		if _, err := v1alpha1.NewWorkloadRule(bad); err == nil {
			t.Error("NewWorkloadRule accepted an invalid podSelector")
		}
	})
}
