package palisade_test

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"palisade.dev/palisade/cmd/palisade-controller/app"
)

func daemonSet(t *testing.T, ms []manifest) *appsv1.DaemonSet {
	t.Helper()
	ds := find(ms, "DaemonSet")
	if len(ds) != 1 {
		t.Fatalf("want 1 DaemonSet, got %d", len(ds))
	}
	d := &appsv1.DaemonSet{}
	decodeStrict(t, ds[0], d)
	return d
}

// argValue is the value of --name=value in args, and whether it is there.
func argValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func fieldEnv(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	return env
}

func TestAgentDaemonSet(t *testing.T) {
	ms, err := render(t, nil)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	ds := daemonSet(t, ms)
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || !pod.HostPID || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v, hostPID %v, dnsPolicy %q; want host network and PIDs, ClusterFirstWithHostNet", pod.HostNetwork, pod.HostPID, pod.DNSPolicy)
	}
	if pod.PriorityClassName != "system-node-critical" || pod.ServiceAccountName != "palisade-agent" {
		t.Errorf("priorityClassName %q, serviceAccountName %q", pod.PriorityClassName, pod.ServiceAccountName)
	}
	// Every taint, NoExecute ones (not-ready, unreachable, out-of-service) included.
	if !cmp.Equal(pod.Tolerations, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}) {
		t.Errorf("tolerations %+v, want one that tolerates every taint", pod.Tolerations)
	}
	c := pod.Containers[0]
	for _, want := range []string{
		"--request-certificate",
		"--cert-dir=/var/lib/palisade-agent/pki",
		"--ca-configmap=palisade-system/palisade-agent-ca",
		"--controller-address=palisade-agent-heartbeat.palisade-system.svc:9443",
		"--interval=1s",
		"--self-fence-after=0s",
		"--kubelet-stop-command=nsenter -t 1 -m -- systemctl stop kubelet",
		"--cri-endpoint=unix:///run/containerd/containerd.sock",
		"--state-dir=/var/lib/palisade",
	} {
		if !hasArg(c.Args, want) {
			t.Errorf("agent args %q lack %q", c.Args, want)
		}
	}
	if _, ok := argValue(c.Args, "api-server-healthz"); ok {
		t.Errorf("api-server-healthz without self-fencing: %q", c.Args)
	}
	if env := fieldEnv(c); env["NODE_NAME"] != "spec.nodeName" || env["POD_UID"] != "metadata.uid" {
		t.Errorf("NODE_NAME and POD_UID not from the downward API: %+v", c.Env)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	for _, v := range pod.Volumes {
		if v.Name == "cri-socket" && (v.HostPath == nil || v.HostPath.Path != "/run/containerd/containerd.sock" || mounts["cri-socket"] != "/run/containerd/containerd.sock") {
			t.Errorf("containerd socket not mounted from the host at its path: %+v, mounts %v", v, mounts)
		}
	}
	// The fencing token must outlive the pod and the node's reboots: a hostPath, not an emptyDir.
	state := false
	for _, v := range pod.Volumes {
		if v.Name == "state" {
			state = v.HostPath != nil && v.HostPath.Path == "/var/lib/palisade" && mounts["state"] == "/var/lib/palisade"
		}
	}
	if !state {
		t.Errorf("the agent's state directory is not the node's /var/lib/palisade: volumes %+v, mounts %v", pod.Volumes, mounts)
	}
	if mounts["cri-socket"] == "" || mounts["pki"] != "/var/lib/palisade-agent/pki" {
		t.Errorf("volume mounts %v lack the CRI socket or the certificate directory", mounts)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("agent resources without memory request or limit: %+v", c.Resources)
	}
}

func TestAgentValues(t *testing.T) {
	ms, err := render(t, map[string]any{"agent": map[string]any{
		"selfFenceAfter": "45s", "interval": "2s", "criEndpoint": "/run/k3s/containerd/containerd.sock", "kubeletStopCommand": "",
		"watchdogDevice": "/dev/watchdog", "watchdogTimeout": "20s", "extraArgs": []any{"--executor-timeout=1m"}, "stateDir": "/var/lib/rancher/palisade",
		"heartbeatPort": 10443,
	}})
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	checkHeartbeatPorts(t, heartbeatService(t, ms), deployment(t, ms).Spec.Template.Spec.Containers[0], 10443)
	pod := daemonSet(t, ms).Spec.Template.Spec
	args := pod.Containers[0].Args
	for _, want := range []string{
		"--self-fence-after=45s", "--interval=2s", "--cri-endpoint=/run/k3s/containerd/containerd.sock", "--kubelet-stop-command=",
		"--api-server-healthz=https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)/readyz",
		"--watchdog-device=/dev/watchdog", "--watchdog-timeout=20s", "--executor-timeout=1m",
	} {
		if !hasArg(args, want) {
			t.Errorf("agent args %q lack %q", args, want)
		}
	}
	paths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			paths[v.Name] = v.HostPath.Path
		}
	}
	if diff := cmp.Diff(map[string]string{"cri-socket": "/run/k3s/containerd/containerd.sock", "watchdog": "/dev/watchdog", "state": "/var/lib/rancher/palisade"}, paths); diff != "" {
		t.Errorf("host paths (-want +got):\n%s", diff)
	}

	// The petted watchdog's timeout goes only with self-fencing on and a device (the agent
	// refuses it otherwise); the default's is 60s.
	for _, tc := range []struct {
		agent map[string]any
		want  string
	}{
		{map[string]any{"selfFenceAfter": "45s", "watchdogDevice": "/dev/watchdog"}, "--watchdog-timeout=60s"},
		{map[string]any{"selfFenceAfter": "0s", "watchdogDevice": "/dev/watchdog"}, ""},
		{map[string]any{"selfFenceAfter": "45s"}, ""},
		{map[string]any{"selfFenceAfter": "45s", "watchdogDevice": "/dev/watchdog", "watchdogTimeout": ""}, ""},
	} {
		ms, err := render(t, map[string]any{"agent": tc.agent})
		if err != nil {
			t.Fatalf("rendering %v: %v", tc.agent, err)
		}
		var got string
		for _, a := range daemonSet(t, ms).Spec.Template.Spec.Containers[0].Args {
			if strings.HasPrefix(a, "--watchdog-timeout") {
				got = a
			}
		}
		if got != tc.want {
			t.Errorf("agent values %v: watchdog timeout arg %q, want %q", tc.agent, got, tc.want)
		}
	}

	for _, bad := range []string{"500ms", "0s", "1h"} {
		if _, err := render(t, map[string]any{"agent": map[string]any{"watchdogTimeout": bad}}); err == nil || !strings.Contains(err.Error(), "watchdogTimeout") {
			t.Errorf("watchdogTimeout %q: err = %v, want a refusal (whole seconds or minutes, not 0)", bad, err)
		}
	}

	_, err = render(t, map[string]any{"agent": map[string]any{"criEndpoint": "containerd.sock"}})
	if err == nil || !strings.Contains(err.Error(), "criEndpoint") { // the schema refuses it first
		t.Errorf("relative criEndpoint: err = %v, want a refusal", err)
	}
}

// TestAgentWiring checks that the chart's pieces agree: the heartbeat Service selects the
// controller's pods only when the leader labelled them, on the controller's heartbeat port;
// the agents' controller address is a name in the server certificate; the controller signs for
// the agents' ServiceAccount and publishes the CA where the agents read it.
func TestAgentWiring(t *testing.T) {
	ms, err := render(t, nil)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	dep, ds := deployment(t, ms), daemonSet(t, ms)
	ctl, agentArgs := dep.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Containers[0].Args

	svc := heartbeatService(t, ms)
	want := map[string]string{app.LabelAgentEndpoint: "true"}
	for k, v := range dep.Spec.Selector.MatchLabels {
		want[k] = v
	}
	if diff := cmp.Diff(want, svc.Spec.Selector); diff != "" {
		t.Errorf("heartbeat Service selector (-want +got):\n%s", diff)
	}
	if _, ok := dep.Spec.Template.Labels[app.LabelAgentEndpoint]; ok {
		t.Error("the pod template carries the leader label: every replica would get heartbeats")
	}
	checkHeartbeatPorts(t, svc, ctl, 9443)

	listen, _ := argValue(ctl.Args, "agent-listen-address")
	hosts, _ := argValue(ctl.Args, "agent-tls-hosts")
	addr, _ := argValue(agentArgs, "controller-address")
	host, p, err := net.SplitHostPort(addr)
	if err != nil || listen != ":"+p || !slices.Contains(strings.Split(hosts, ","), host) {
		t.Errorf("agents reach %q; the controller listens on %q with a certificate for %q", addr, listen, hosts)
	}
	if sa, _ := argValue(ctl.Args, "agent-service-account"); sa != namespace+"/"+ds.Spec.Template.Spec.ServiceAccountName {
		t.Errorf("--agent-service-account=%q, the agents run as %s", sa, ds.Spec.Template.Spec.ServiceAccountName)
	}
	cm, _ := argValue(ctl.Args, "agent-ca-configmap")
	if got, _ := argValue(agentArgs, "ca-configmap"); got != namespace+"/"+cm {
		t.Errorf("agents read the CA from %q, the controller publishes it in %s/%s", got, namespace, cm)
	}
	for _, f := range []string{"agent-tls-cert", "agent-tls-key", "agent-ca"} {
		if v, _ := argValue(ctl.Args, f); !strings.HasPrefix(v, "/var/run/palisade/agent-tls/") {
			t.Errorf("--%s=%q is not in the writable agent-tls volume", f, v)
		}
	}
	if env := fieldEnv(ctl); env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("POD_NAME and POD_NAMESPACE not from the downward API: %+v", ctl.Env)
	}
}

func heartbeatService(t *testing.T, ms []manifest) *corev1.Service {
	t.Helper()
	for _, m := range find(ms, "Service") {
		if m.name == "palisade-agent-heartbeat" {
			svc := &corev1.Service{}
			decodeStrict(t, m, svc)
			return svc
		}
	}
	t.Fatal("no heartbeat Service")
	return nil
}

// checkHeartbeatPorts checks that the heartbeat Service takes port on TCP (HTTPS: orders, and
// heartbeats when datagrams do not pass) and on UDP (the heartbeat datagrams), each reaching
// the controller's container port of the same number and protocol under a valid port name.
func checkHeartbeatPorts(t *testing.T, svc *corev1.Service, ctl corev1.Container, port int32) {
	t.Helper()
	type hostPort struct {
		Port     int32
		Protocol corev1.Protocol
	}
	var got []hostPort
	for _, sp := range svc.Spec.Ports {
		got = append(got, hostPort{sp.Port, sp.Protocol})
		if errs := validation.IsValidPortName(sp.TargetPort.String()); len(errs) > 0 {
			t.Errorf("Service port %s: targetPort %q: %v", sp.Name, sp.TargetPort.String(), errs)
		}
		if !slices.ContainsFunc(ctl.Ports, func(p corev1.ContainerPort) bool {
			return p.Name == sp.TargetPort.String() && p.ContainerPort == sp.Port && p.Protocol == sp.Protocol
		}) {
			t.Errorf("Service port %+v does not reach a controller port of its number and protocol: %+v", sp, ctl.Ports)
		}
	}
	if diff := cmp.Diff([]hostPort{{port, corev1.ProtocolTCP}, {port, corev1.ProtocolUDP}}, got); diff != "" {
		t.Errorf("heartbeat Service ports (-want +got):\n%s", diff)
	}
}

// TestControllerCSRRules checks the controller's ClusterRole: it may approve and sign for the
// agents' signer and no other.
func TestControllerCSRRules(t *testing.T) {
	ms, err := render(t, nil)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	for _, m := range find(ms, "ClusterRole") {
		var r struct {
			Rules []rbacv1.PolicyRule `json:"rules"`
		}
		if err := yaml.Unmarshal(m.doc, &r); err != nil {
			t.Fatal(err)
		}
		for _, rule := range r.Rules {
			if slices.Contains(rule.Resources, "signers") && (m.name != "palisade" || !cmp.Equal(rule.ResourceNames, []string{"palisade.dev/agent"})) {
				t.Errorf("ClusterRole %s grants signers beyond the controller's palisade.dev/agent: %+v", m.name, rule)
			}
		}
	}
}
