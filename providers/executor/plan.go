package executor

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/moby/sys/signal"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

const (
	// DefaultGracePeriodSeconds is the API's default terminationGracePeriodSeconds.
	DefaultGracePeriodSeconds int64 = 30
	// minimumPodGracePeriodSeconds is the pod worker's floor for a pod's grace period.
	minimumPodGracePeriodSeconds int64 = 1
)

// KillReason says why containers are being stopped.
type KillReason string

const (
	// ReasonPodTermination stops the whole pod (a deletion, an eviction, a fence).
	ReasonPodTermination KillReason = "PodTermination"
	// ReasonLivenessProbe stops one container whose liveness probe failed.
	ReasonLivenessProbe KillReason = "LivenessProbe"
	// ReasonStartupProbe stops one container whose startup probe failed.
	ReasonStartupProbe KillReason = "StartupProbe"
)

// Request says what to terminate.
type Request struct {
	Pod *corev1.Pod
	// Reason defaults to ReasonPodTermination.
	Reason KillReason
	// Container is the container whose probe failed; required for the probe reasons, which
	// stop that container only.
	Container string
}

func (r Request) reason() KillReason {
	if r.Reason == "" {
		return ReasonPodTermination
	}
	return r.Reason
}

// GracePeriodSeconds is the effective grace period of req. For a pod termination it is the
// pod's deletionGracePeriodSeconds when set, else its terminationGracePeriodSeconds, else 30,
// and at least 1. For a probe's kill of one container, deletionGracePeriodSeconds still comes
// first, then the probe's own terminationGracePeriodSeconds, then the pod's.
func GracePeriodSeconds(req Request) (int64, error) {
	pod := req.Pod
	if pod == nil {
		return 0, fmt.Errorf("computing grace period: no pod")
	}
	if d := pod.DeletionGracePeriodSeconds; d != nil {
		return max(*d, minimumPodGracePeriodSeconds), nil
	}
	podGrace := DefaultGracePeriodSeconds
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		podGrace = *g
	}
	switch req.reason() {
	case ReasonPodTermination:
		return max(podGrace, minimumPodGracePeriodSeconds), nil
	case ReasonLivenessProbe, ReasonStartupProbe:
		c := findContainer(pod, req.Container)
		if c == nil {
			return 0, fmt.Errorf("computing grace period: pod %s/%s has no container %q", pod.Namespace, pod.Name, req.Container)
		}
		probe := c.LivenessProbe
		if req.reason() == ReasonStartupProbe {
			probe = c.StartupProbe
		}
		if probe != nil && probe.TerminationGracePeriodSeconds != nil {
			return *probe.TerminationGracePeriodSeconds, nil
		}
		return podGrace, nil
	}
	return 0, fmt.Errorf("computing grace period: unknown reason %q", req.Reason)
}

// ContainerPlan is how one container of the pod is stopped.
type ContainerPlan struct {
	Name string
	// Sidecar is an init container with restartPolicy Always.
	Sidecar bool
	// PreStop is the container's preStop hook, nil for none.
	PreStop *corev1.LifecycleHandler
	// StopSignal is lifecycle.stopSignal, "" when the pod sets none (then the image's
	// STOPSIGNAL, else SIGTERM: see StopSignal).
	StopSignal corev1.Signal
	// WaitFor names the containers that must have ended before this one gets its stop signal.
	WaitFor []string
	// Spec is the container's spec (for the preStop hook's named ports).
	Spec *corev1.Container
}

// Plan is how a Request is carried out.
type Plan struct {
	Reason             KillReason
	GracePeriodSeconds int64
	// Containers in the order of the pod's spec: init containers, then containers, then
	// ephemeral containers.
	Containers []ContainerPlan
}

// NewPlan computes the plan of req.
func NewPlan(req Request) (*Plan, error) {
	grace, err := GracePeriodSeconds(req)
	if err != nil {
		return nil, err
	}
	p := &Plan{Reason: req.reason(), GracePeriodSeconds: grace}
	if p.Reason != ReasonPodTermination {
		// A probe's kill stops one container with no termination ordering.
		p.Containers = []ContainerPlan{containerPlan(findContainer(req.Pod, req.Container), false)}
		return p, nil
	}
	spec := req.Pod.Spec
	var mains []string
	for i := range spec.Containers {
		mains = append(mains, spec.Containers[i].Name)
	}
	inits := make([]ContainerPlan, len(spec.InitContainers))
	next := "" // the next sidecar in order of definition
	for i := len(spec.InitContainers) - 1; i >= 0; i-- {
		c := &spec.InitContainers[i]
		inits[i] = containerPlan(c, IsSidecar(c))
		if !inits[i].Sidecar {
			continue
		}
		inits[i].WaitFor = append(inits[i].WaitFor, mains...)
		if next != "" {
			inits[i].WaitFor = append(inits[i].WaitFor, next)
		}
		next = c.Name
	}
	p.Containers = inits
	for i := range spec.Containers {
		p.Containers = append(p.Containers, containerPlan(&spec.Containers[i], false))
	}
	// Ephemeral containers (kubectl debug) are stopped beside the main containers, and no
	// sidecar waits for them: the kubelet orders sidecars after the spec's containers only
	// (kuberuntime_termination_order.go), so a debug shell that ignores SIGTERM does not hold
	// a pod's sidecars until the grace period ends.
	for i := range spec.EphemeralContainers {
		p.Containers = append(p.Containers, containerPlan((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon), false))
	}
	return p, nil
}

// Container returns the plan of the named container, nil when the pod has none.
func (p *Plan) Container(name string) *ContainerPlan {
	for i := range p.Containers {
		if p.Containers[i].Name == name {
			return &p.Containers[i]
		}
	}
	return nil
}

func containerPlan(c *corev1.Container, sidecar bool) ContainerPlan {
	cp := ContainerPlan{Name: c.Name, Sidecar: sidecar, Spec: c}
	if l := c.Lifecycle; l != nil {
		cp.PreStop = l.PreStop
		if l.StopSignal != nil {
			cp.StopSignal = *l.StopSignal
		}
	}
	return cp
}

// IsSidecar reports whether an init container is a sidecar (restartPolicy Always).
func IsSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if c := &pod.Spec.EphemeralContainers[i]; c.Name == name {
			return (*corev1.Container)(&c.EphemeralContainerCommon)
		}
	}
	return nil
}

// SignalSource says where a stop signal came from.
type SignalSource string

const (
	SignalFromLifecycle SignalSource = "Lifecycle"
	SignalFromImage     SignalSource = "Image"
	SignalDefault       SignalSource = "Default"
)

// StopSignal chooses a container's stop signal: the pod's lifecycle.stopSignal, else the
// image's STOPSIGNAL (a name with or without "SIG", or a number), else SIGTERM.
func StopSignal(lifecycle corev1.Signal, imageStopSignal string) (syscall.Signal, SignalSource, error) {
	if lifecycle != "" {
		s, err := parseSignal(string(lifecycle))
		return s, SignalFromLifecycle, err
	}
	if strings.TrimSpace(imageStopSignal) != "" {
		s, err := parseSignal(imageStopSignal)
		return s, SignalFromImage, err
	}
	return syscall.SIGTERM, SignalDefault, nil
}

// parseSignal reads a signal name or number; numbers outside Linux's signals (1 to SIGRTMAX),
// which moby's parser lets through, are refused.
func parseSignal(s string) (syscall.Signal, error) {
	sig, err := signal.ParseSignal(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("parsing stop signal %q: %w", s, err)
	}
	if sig < 1 || sig > signal.SignalMap["RTMAX"] {
		return 0, fmt.Errorf("parsing stop signal %q: no such signal", s)
	}
	return sig, nil
}

// SignalName is the name of sig ("SIGTERM", "SIGRTMIN+3"), or its number.
func SignalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	// Named as the parser reads them back: RTMIN+n for the lower half, RTMAX-n for the upper.
	rtmin, rtmax := signal.SignalMap["RTMIN"], signal.SignalMap["RTMAX"]
	switch {
	case sig == rtmin:
		return "SIGRTMIN"
	case sig == rtmax:
		return "SIGRTMAX"
	case sig > rtmin && sig-rtmin <= 15:
		return fmt.Sprintf("SIGRTMIN+%d", sig-rtmin)
	case sig > rtmin && sig < rtmax:
		return fmt.Sprintf("SIGRTMAX-%d", rtmax-sig)
	}
	return fmt.Sprint(int(sig))
}
