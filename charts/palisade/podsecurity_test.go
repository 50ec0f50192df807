package palisade_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// restrictedViolations checks a pod against the Pod Security Standards' "restricted" profile
// (https://kubernetes.io/docs/concepts/security/pod-security-standards/), which includes
// "baseline", control by control, and says which controls it fails.
func restrictedViolations(meta metav1.ObjectMeta, spec corev1.PodSpec) []string {
	var v []string
	fail := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	// Baseline: host namespaces, HostProcess, host paths, sysctls, AppArmor annotations.
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		fail("host namespaces: hostNetwork %v, hostPID %v, hostIPC %v", spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	if w := psc.WindowsOptions; w != nil && w.HostProcess != nil && *w.HostProcess {
		fail("pod: HostProcess")
	}
	for _, s := range psc.Sysctls {
		if !slices.Contains(safeSysctls, s.Name) {
			fail("sysctl %s is not a safe one", s.Name)
		}
	}
	for k, val := range meta.Annotations {
		if strings.HasPrefix(k, "container.apparmor.security.beta.kubernetes.io/") && val != "runtime/default" && !strings.HasPrefix(val, "localhost/") {
			fail("AppArmor annotation %s=%s", k, val)
		}
	}
	checkAppArmor(psc.AppArmorProfile, "pod", fail)
	checkSELinux(psc.SELinuxOptions, "pod", fail)
	checkSeccompNotUnconfined(psc.SeccompProfile, "pod", fail)
	// Restricted: volume types, non-root, seccomp.
	for _, vol := range spec.Volumes {
		if t := volumeType(vol.VolumeSource); !slices.Contains(restrictedVolumes, t) {
			fail("volume %s is of type %s", vol.Name, t)
		}
	}
	if psc.RunAsUser != nil && *psc.RunAsUser == 0 {
		fail("pod: runAsUser 0")
	}
	podNonRoot := psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
	podSeccomp := psc.SeccompProfile != nil && (psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault || psc.SeccompProfile.Type == corev1.SeccompProfileTypeLocalhost)
	for _, c := range allContainers(spec) {
		checkContainer(c, podNonRoot, podSeccomp, fail)
	}
	return v
}

// checkContainer checks one container's side of every control.
func checkContainer(c corev1.Container, podNonRoot, podSeccomp bool, fail func(string, ...any)) {
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	who := "container " + c.Name
	if sc.Privileged != nil && *sc.Privileged {
		fail("%s: privileged", who)
	}
	if w := sc.WindowsOptions; w != nil && w.HostProcess != nil && *w.HostProcess {
		fail("%s: HostProcess", who)
	}
	for _, p := range c.Ports {
		if p.HostPort != 0 {
			fail("%s: hostPort %d", who, p.HostPort)
		}
	}
	checkAppArmor(sc.AppArmorProfile, who, fail)
	checkSELinux(sc.SELinuxOptions, who, fail)
	checkSeccompNotUnconfined(sc.SeccompProfile, who, fail)
	if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
		fail("%s: procMount %s", who, *sc.ProcMount)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		fail("%s: allowPrivilegeEscalation is not false", who)
	}
	if sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot || sc.RunAsNonRoot == nil && !podNonRoot {
		fail("%s: runAsNonRoot is not true (on the pod or the container)", who)
	}
	if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		fail("%s: runAsUser 0", who)
	}
	if sc.SeccompProfile == nil && !podSeccomp {
		fail("%s: no RuntimeDefault or Localhost seccomp profile (on the pod or the container)", who)
	}
	var drop, add []corev1.Capability
	if sc.Capabilities != nil {
		drop, add = sc.Capabilities.Drop, sc.Capabilities.Add
	}
	if !slices.Contains(drop, "ALL") {
		fail("%s: capabilities do not drop ALL", who)
	}
	for _, a := range add {
		if a != "NET_BIND_SERVICE" {
			fail("%s: adds capability %s", who, a)
		}
	}
}

func checkAppArmor(p *corev1.AppArmorProfile, who string, fail func(string, ...any)) {
	if p != nil && p.Type != corev1.AppArmorProfileTypeRuntimeDefault && p.Type != corev1.AppArmorProfileTypeLocalhost {
		fail("%s: AppArmor profile %s", who, p.Type)
	}
}

func checkSELinux(o *corev1.SELinuxOptions, who string, fail func(string, ...any)) {
	if o == nil {
		return
	}
	if !slices.Contains([]string{"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}, o.Type) || o.User != "" || o.Role != "" {
		fail("%s: SELinux options %+v", who, *o)
	}
}

func checkSeccompNotUnconfined(p *corev1.SeccompProfile, who string, fail func(string, ...any)) {
	if p != nil && p.Type == corev1.SeccompProfileTypeUnconfined {
		fail("%s: seccomp Unconfined", who)
	}
}

// safeSysctls are the baseline profile's allowed sysctls.
var safeSysctls = []string{
	"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
	"net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
}

// restrictedVolumes are the volume types the restricted profile allows.
var restrictedVolumes = []string{"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}

func volumeType(s corev1.VolumeSource) string {
	switch {
	case s.ConfigMap != nil:
		return "configMap"
	case s.CSI != nil:
		return "csi"
	case s.DownwardAPI != nil:
		return "downwardAPI"
	case s.EmptyDir != nil:
		return "emptyDir"
	case s.Ephemeral != nil:
		return "ephemeral"
	case s.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim"
	case s.Projected != nil:
		return "projected"
	case s.Secret != nil:
		return "secret"
	case s.HostPath != nil:
		return "hostPath"
	}
	return "another"
}

func allContainers(spec corev1.PodSpec) []corev1.Container {
	cs := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	for _, e := range spec.EphemeralContainers {
		cs = append(cs, corev1.Container(e.EphemeralContainerCommon))
	}
	return cs
}

// TestControllerPodRestricted: the controller's pod and the uninstall cleanup Job's meet the
// restricted profile with a read-only root filesystem, the controller's with a writable
// emptyDir for whatever it writes; the agent's pod does not (it needs privileges) and the
// checker says so; and nothing the chart renders carries a Pod Security label or annotation
// that would claim otherwise.
func TestControllerPodRestricted(t *testing.T) {
	ms, err := render(t, nil)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	pod := deployment(t, ms).Spec.Template
	if v := restrictedViolations(pod.ObjectMeta, pod.Spec); len(v) > 0 {
		t.Errorf("the controller's pod violates the restricted profile:\n%s", strings.Join(v, "\n"))
	}
	cleanup := uninstallJob(t, ms).Spec.Template
	if v := restrictedViolations(cleanup.ObjectMeta, cleanup.Spec); len(v) > 0 {
		t.Errorf("the uninstall Job's pod violates the restricted profile:\n%s", strings.Join(v, "\n"))
	}
	for _, c := range cleanup.Spec.Containers {
		if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("uninstall Job container %s: root filesystem not read-only", c.Name)
		}
	}
	for _, c := range pod.Spec.Containers {
		if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s: root filesystem not read-only", c.Name)
		}
		mounts := map[string]string{}
		for _, m := range c.VolumeMounts {
			mounts[m.MountPath] = m.Name
		}
		// ipmitool and the Go runtime's temporary files; the heartbeat server's certificate.
		for _, dir := range []string{"/tmp", "/var/run/palisade/agent-tls"} {
			if mounts[dir] == "" {
				t.Errorf("container %s: no writable volume at %s (mounts %v)", c.Name, dir, mounts)
			}
		}
	}
	agent := daemonSet(t, ms).Spec.Template
	if v := restrictedViolations(agent.ObjectMeta, agent.Spec); len(v) < 4 {
		t.Errorf("the agent's privileged pod passes the restricted check with only %q: the check is broken", v)
	}
	for _, m := range ms {
		var obj struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     struct {
				Template struct {
					Metadata metav1.ObjectMeta `json:"metadata"`
				} `json:"template"`
			} `json:"spec"`
		}
		decodeLoose(t, m, &obj)
		for _, meta := range []metav1.ObjectMeta{obj.Metadata, obj.Spec.Template.Metadata} {
			for _, kv := range []map[string]string{meta.Labels, meta.Annotations} {
				for k := range kv {
					if strings.HasPrefix(k, "pod-security.kubernetes.io/") {
						t.Errorf("%s %s carries %s", m.kind, m.name, k)
					}
				}
			}
		}
	}
}

// TestResources: the controller, the agent and the uninstall Job request CPU and memory and
// have a memory limit (the controller's Go runtime takes 90% of it as its own limit), from the
// values.
func TestResources(t *testing.T) {
	ms, err := render(t, map[string]any{
		"resources": map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "200Mi"}, "limits": map[string]any{"memory": "512Mi"}},
	})
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	ctl := deployment(t, ms).Spec.Template.Spec.Containers[0].Resources
	if !ctl.Requests.Cpu().Equal(resource.MustParse("50m")) || !ctl.Requests.Memory().Equal(resource.MustParse("200Mi")) || !ctl.Limits.Memory().Equal(resource.MustParse("512Mi")) {
		t.Errorf("controller resources %+v, want the values'", ctl)
	}
	defaults, err := render(t, nil)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	for name, r := range map[string]corev1.ResourceRequirements{
		"controller": deployment(t, defaults).Spec.Template.Spec.Containers[0].Resources,
		"agent":      daemonSet(t, defaults).Spec.Template.Spec.Containers[0].Resources,
		"uninstall":  uninstallJob(t, defaults).Spec.Template.Spec.Containers[0].Resources,
	} {
		if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
			t.Errorf("%s: resources %+v lack a CPU or memory request or a memory limit", name, r)
		}
		if r.Limits.Memory().Cmp(*r.Requests.Memory()) < 0 {
			t.Errorf("%s: memory limit below the request: %+v", name, r)
		}
	}
	if got := deployment(t, defaults).Spec.Template.Spec.Containers[0].Resources.Limits.Memory(); got.Cmp(resource.MustParse("180Mi")) < 0 {
		t.Errorf("controller memory limit %s: below what the README measures at 5000 nodes (about 125 MiB) with room for the start's peak and larger clusters", got)
	}
}

// testPod is the rendered helm test Pod, or nil.
func testPod(t *testing.T, ms []manifest) *corev1.Pod {
	t.Helper()
	for _, m := range find(ms, "Pod") {
		p := &corev1.Pod{}
		decodeStrict(t, m, p)
		if p.Annotations["helm.sh/hook"] == "test" {
			return p
		}
	}
	return nil
}

// TestHelmTestHook: the test Pod is a helm test hook that runs the controller's image's
// check-metrics on the metrics Service's port, meets the restricted profile, and is counted by no
// Service or PodDisruptionBudget of the controller.
func TestHelmTestHook(t *testing.T) {
	ms, err := render(t, nil)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	pod := testPod(t, ms)
	if pod == nil {
		t.Fatal("no Pod with the annotation helm.sh/hook: test")
	}
	if v := restrictedViolations(pod.ObjectMeta, pod.Spec); len(v) > 0 {
		t.Errorf("the test Pod violates the restricted profile:\n%s", strings.Join(v, "\n"))
	}
	c := pod.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	if c.Image != deployment(t, ms).Spec.Template.Spec.Containers[0].Image || pod.Spec.RestartPolicy != corev1.RestartPolicyNever ||
		strings.Join(c.Command, " ") != "palisade-controller" ||
		!strings.HasPrefix(args, "check-metrics --url=http://palisade-metrics.palisade-system.svc:8080/metrics --attempts=10") {
		t.Errorf("test Pod image %q (want the controller's), restartPolicy %q, command %q, args %q", c.Image, pod.Spec.RestartPolicy, c.Command, c.Args)
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Errorf("test Pod's root filesystem not read-only")
	}
	for _, m := range find(ms, "Service") {
		svc := &corev1.Service{}
		decodeStrict(t, m, svc)
		if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			t.Errorf("Service %s selects the test Pod", svc.Name)
		}
	}
	if sel := deployment(t, ms).Spec.Selector.MatchLabels; labels.SelectorFromSet(sel).Matches(labels.Set(pod.Labels)) {
		t.Errorf("the controller's selector %v (its PodDisruptionBudget's) matches the test Pod", sel)
	}

	for name, vals := range map[string]map[string]any{
		"tests off":   {"tests": map[string]any{"enabled": false}},
		"metrics off": {"metrics": map[string]any{"enabled": false}},
	} {
		ms, err := render(t, vals)
		if err != nil {
			t.Fatalf("%s: rendering: %v", name, err)
		}
		if testPod(t, ms) != nil {
			t.Errorf("%s: the test Pod is rendered", name)
		}
	}
}
