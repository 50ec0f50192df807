package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "palisade.dev/palisade/config/v1alpha1"
)

// The controller's rules, restated from fencing/ (which the CLI does not link: it is the
// controller's state machine). Each says where it comes from.

// Defaults of FencingPolicy fields (fencing/policy.go, fencing/plan.go, fencing/recovery.go).
const (
	defaultLeaseTimeout  = 20 * time.Second
	defaultMethodTimeout = 60 * time.Second
	defaultFlapWindow    = time.Hour
)

// defaultMaxUnhealthy is the storm guard's default (fencing/policy.go).
var defaultMaxUnhealthy = intstr.FromString("40%")

// policyMatch is one policy's answer for one node.
type policyMatch struct {
	policy   *v1alpha1.FencingPolicy
	selector string // the selector as kubectl prints one, "<every node>" when empty
	matches  bool
	err      error // no selector parses: the controller skips the policy
	// specErr: spec.nodeSelector does not parse, and the selector last in force
	// (status.nodeSelector) decides instead, as it does for the controller.
	specErr error
}

// matchPolicies judges every policy for node, by name, and returns the index of the one the
// controller uses (-1 for none): of all whose node selector matches, the first by name, a
// policy whose spec's selector does not parse judged by its selector last in force, and one
// without any skipped (fencing/policy.go, policyFor).
func matchPolicies(policies []v1alpha1.FencingPolicy, node *corev1.Node) ([]policyMatch, int) {
	sorted := make([]v1alpha1.FencingPolicy, len(policies))
	copy(sorted, policies)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	out := make([]policyMatch, 0, len(sorted))
	chosen := -1
	for i := range sorted {
		m := policyMatch{policy: &sorted[i], selector: "<every node>"}
		sel, err := metav1.LabelSelectorAsSelector(&sorted[i].Spec.NodeSelector)
		if last, ok := sorted[i].LastNodeSelector(); err != nil && ok {
			sel, m.specErr, err = last, err, nil
		}
		switch {
		case err != nil:
			m.err = err
		default:
			if s := sel.String(); s != "" {
				m.selector = s
			}
			m.matches = sel.Matches(labels.Set(node.Labels))
		}
		if m.matches && chosen < 0 {
			chosen = i
		}
		out = append(out, m)
	}
	return out, chosen
}

// levelOrder is the chain as a fence takes it (the controller's rule).
func levelOrder(chain []v1alpha1.Method) []v1alpha1.Method { return v1alpha1.LevelOrder(chain) }

// stage is one step of the escalation chain: a method of its own, or a level whose methods
// must all be confirmed.
type stage struct {
	level   string
	methods []v1alpha1.Method
}

// stages groups a level-ordered chain into its stages.
func stages(chain []v1alpha1.Method) []stage {
	var out []stage
	for _, m := range levelOrder(chain) {
		if n := len(out); n > 0 && m.Level != "" && out[n-1].level == m.Level {
			out[n-1].methods = append(out[n-1].methods, m)
			continue
		}
		out = append(out, stage{level: m.Level, methods: []v1alpha1.Method{m}})
	}
	return out
}

// powersOff says whether a method turns the machine off.
func powersOff(t v1alpha1.MethodType) bool {
	switch t {
	case v1alpha1.MethodIPMI, v1alpha1.MethodRedfish, v1alpha1.MethodAWS, v1alpha1.MethodVSphere:
		return true
	}
	return false
}

// needsAgent says whether a method acts through the node's agent (fencing/methods.go): a node
// with no signal on any path skips it, and only a chain that starts with it fences a node that
// independent signals show alive.
func needsAgent(t v1alpha1.MethodType) bool { return t == v1alpha1.MethodExecutor }

func methodTimeout(m v1alpha1.Method) time.Duration {
	if m.Timeout != nil && m.Timeout.Duration > 0 {
		return m.Timeout.Duration
	}
	return defaultMethodTimeout
}

// describeMethod says what a method does to node, for people about to fence it.
func describeMethod(m v1alpha1.Method, node *corev1.Node) string {
	bmc := node.Annotations[v1alpha1.AnnotationBMCAddress]
	if bmc == "" {
		bmc = "none: annotation " + v1alpha1.AnnotationBMCAddress + " is not set, the method will fail with BadTarget"
	}
	provider := orDash(node.Spec.ProviderID)
	switch m.Type {
	case v1alpha1.MethodIPMI:
		return "POWERS THE MACHINE OFF through its BMC over IPMI (BMC " + bmc + "), confirmed when the BMC reads power Off"
	case v1alpha1.MethodRedfish:
		return "POWERS THE MACHINE OFF through its BMC over Redfish, ForceOff (BMC " + bmc + "), confirmed when the BMC reads PowerState Off"
	case v1alpha1.MethodAWS:
		return "POWERS THE MACHINE OFF: force-stops its EC2 instance (" + provider + "), confirmed when EC2 reads it stopped"
	case v1alpha1.MethodVSphere:
		return "POWERS THE MACHINE OFF: powers off its vSphere VM (" + provider + "), confirmed when vCenter reads it poweredOff"
	case v1alpha1.MethodExecutor:
		grace := "each pod's own grace period"
		if m.Executor != nil && m.Executor.GracePeriodSeconds != nil {
			grace = fmt.Sprintf("grace periods capped at %ds", *m.Executor.GracePeriodSeconds)
		}
		return "the node's agent stops the kubelet and terminates every workload container as the kubelet would (" + grace +
			"), confirmed by the agent's read-back of the runtime; the machine keeps running"
	case v1alpha1.MethodSelfFence:
		after := "its safeAfter"
		if m.SelfFence != nil {
			after = m.SelfFence.SafeAfter.Duration.String()
		}
		return "relies on the node's agent fencing itself: counted fenced once the node sent no signal on any path for " + after
	case v1alpha1.MethodNetworkFence:
		class := ""
		if m.NetworkFence != nil {
			class = " (NetworkFenceClass " + m.NetworkFence.NetworkFenceClassName + ")"
		}
		return "has the storage refuse the node's addresses through a csi-addons NetworkFence" + class +
			"; the machine keeps running, cut off from its volumes, until the NodeFence is deleted after its repair"
	case v1alpha1.MethodStorageGateway:
		gws := ""
		if m.StorageGateway != nil {
			gws = " (" + strings.Join(m.StorageGateway.Gateways, ", ") + ")"
		}
		return "has every storage gateway" + gws + " reject the node's addresses; the machine keeps running, cut off from its volumes"
	}
	return "method type " + string(m.Type)
}

// releaseSteps are what a confirmed fence under p releases, in order (fencing/plan.go,
// releaseSequence; every release field defaults to true).
func releaseSteps(p *v1alpha1.FencingPolicy, node string) []string {
	r := p.Spec.Release
	var steps []string
	if enabled(r.OutOfServiceTaint) {
		steps = append(steps, fmt.Sprintf("add the taint %s=%s:NoExecute: Kubernetes' PodGC force-deletes the node's terminating pods and the attach-detach controller detaches its volumes",
			v1alpha1.TaintOutOfService, v1alpha1.TaintOutOfServiceValue))
	}
	if enabled(r.DeletePods) {
		steps = append(steps, "force-delete the pods bound to "+node+" (marked Failed with a DisruptionTarget condition first; pods tolerating the taint are left alone)")
	}
	for _, m := range p.Spec.Methods {
		if m.Type == v1alpha1.MethodAWS && m.AWS != nil && m.AWS.ForceDetachVolumes {
			steps = append(steps, "if method "+m.Name+" confirmed the fence: force-detach from the stopped instance the EBS volumes of the VolumeAttachments being released")
			break
		}
	}
	if enabled(r.ReleaseAttachments) {
		steps = append(steps, "delete the node's VolumeAttachments, so that its RWO volumes attach elsewhere at once")
	}
	return steps
}

func enabled(b *bool) bool { return b == nil || *b }

// verifyWindow says how long the node's signals are watched after a confirmation.
func verifyWindow(p *v1alpha1.FencingPolicy) string {
	if w := p.Spec.Release.VerifyWindow; w != nil {
		return w.Duration.String()
	}
	return "until one kubelet Lease renewal interval + the renewal margin (1s, or twice how late renewals came lately; 11s with the kubelet's defaults on a quiet cluster) after the node's last renewal, at least 3 agent heartbeat intervals + 1s after the agent was last heard; the Executor's: 3 agent heartbeat intervals + 1s when its agent stopped the kubelet, 5m1s (the kubelet's longest crash back-off) when its agent sees the kubelet running, 11s otherwise"
}

// leaseTimeout is the policy's detection.leaseTimeout or its default.
func leaseTimeout(p *v1alpha1.FencingPolicy) time.Duration {
	if d := p.Spec.Detection.LeaseTimeout; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return defaultLeaseTimeout
}

// maxUnhealthy resolves the storm guard for nodes nodes: a count, or a percentage rounded down
// but at least 1 (fencing/policy.go).
func maxUnhealthy(p *v1alpha1.FencingPolicy, nodes int) (int, string) {
	v := defaultMaxUnhealthy
	text := v.String() + " (default)"
	if p.Spec.StormGuard.MaxUnhealthy != nil {
		v, text = *p.Spec.StormGuard.MaxUnhealthy, p.Spec.StormGuard.MaxUnhealthy.String()
	}
	if v.Type == intstr.Int {
		return v.IntValue(), text
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, nodes, false)
	if err != nil {
		return 0, text
	}
	if n < 1 && nodes > 0 && v.StrVal != "0%" {
		n = 1
	}
	return n, text
}

// recoveryText says when a released node is given back (fencing/recovery.go).
func recoveryText(r v1alpha1.Recovery, node, tool string) string {
	flap := defaultFlapWindow
	if r.FlapWindow != nil {
		flap = r.FlapWindow.Duration
	}
	text := fmt.Sprintf("%s stays fenced until it is back (Ready) and clean: ", node)
	if r.Automatic != nil && !*r.Automatic {
		text += "this policy unfences only on request (" + tool + " unfence)"
	} else {
		text += "rebooted since the fence (its boot ID changed; after a fence that kept the machine on, its agent heartbeats from the new boot too), or confirmed clean (" + tool + " unfence)"
	}
	if flap > 0 {
		text += fmt.Sprintf("; fenced again within %s of a recovery, it is held as Flapping until confirmed clean", flap)
	}
	if r.PowerOn {
		text += "; after the release Palisade powers the machine back on through the power method that fenced it"
	}
	return text
}
