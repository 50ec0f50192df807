package containerd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The kubelet's labels on sandboxes and containers, by which the runtime's objects are matched
// to pods (k8s.io/kubelet/pkg/types).
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
)

// Pod is a pod to run through the CRI, with host networking.
type Pod struct {
	Name, Namespace, UID string
	// Containers are created and started in order (init containers first, as the kubelet
	// starts sidecars before the main containers).
	Containers []Container
	// EventsDir, when set, is mounted at /events in every container (see EventScript).
	EventsDir string
}

// Container is one container of a Pod.
type Container struct {
	Name  string
	Image string
	// Command replaces the image's Cmd when set.
	Command []string
	Env     map[string]string
	// Annotations are the container's, as the kubelet writes its own on every container (the
	// pod's grace periods, the preStop hook, the ports).
	Annotations map[string]string
}

// RunningPod is what RunPod made.
type RunningPod struct {
	SandboxID string
	// ContainerIDs by container name.
	ContainerIDs map[string]string
}

// RunPod creates the pod's sandbox, then creates and starts each container.
func (c *Containerd) RunPod(ctx context.Context, p Pod) (*RunningPod, error) {
	labels := map[string]string{LabelPodName: p.Name, LabelPodNamespace: p.Namespace, LabelPodUID: p.UID}
	logDir := filepath.Join(c.Dir, "logs", p.UID)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("running pod %s: %w", p.Name, err)
	}
	hostNet := &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}
	sandbox := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: p.Name, Namespace: p.Namespace, Uid: p.UID},
		LogDirectory: logDir,
		Labels:       labels,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: hostNet},
		},
	}
	id, err := c.Runtime.RunPodSandbox(ctx, sandbox, "")
	if err != nil {
		return nil, fmt.Errorf("running pod sandbox %s: %w", p.Name, err)
	}
	running := &RunningPod{SandboxID: id, ContainerIDs: map[string]string{}}
	for _, ctr := range p.Containers {
		cid, err := c.startContainer(ctx, p, ctr, id, sandbox)
		if err != nil {
			return running, err
		}
		running.ContainerIDs[ctr.Name] = cid
	}
	return running, nil
}

func (c *Containerd) startContainer(ctx context.Context, p Pod, ctr Container, sandboxID string, sandbox *runtimeapi.PodSandboxConfig) (string, error) {
	labels := map[string]string{LabelContainerName: ctr.Name}
	for k, v := range sandbox.Labels {
		labels[k] = v
	}
	env := []*runtimeapi.KeyValue{{Key: "CONTAINER_NAME", Value: []byte(ctr.Name)}}
	for k, v := range ctr.Env {
		env = append(env, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: ctr.Name},
		Image:       &runtimeapi.ImageSpec{Image: ctr.Image},
		Command:     ctr.Command,
		Envs:        env,
		Labels:      labels,
		Annotations: ctr.Annotations,
		LogPath:     ctr.Name + ".log",
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
		}},
	}
	if p.EventsDir != "" {
		cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/events", HostPath: p.EventsDir}}
	}
	id, err := c.Runtime.CreateContainer(ctx, sandboxID, cfg, sandbox)
	if err != nil {
		return "", fmt.Errorf("creating container %s of pod %s: %w", ctr.Name, p.Name, err)
	}
	if err := c.Runtime.StartContainer(ctx, id); err != nil {
		return id, fmt.Errorf("starting container %s of pod %s: %w", ctr.Name, p.Name, err)
	}
	return id, nil
}
