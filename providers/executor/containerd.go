package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/runtime/restart"
	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	cri "k8s.io/cri-client/pkg"
)

// The kubelet's labels on the runtime's sandboxes and containers (k8s.io/kubelet/pkg/types).
const (
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
	// criNamespace is the containerd namespace of the CRI plugin's objects.
	criNamespace = "k8s.io"
)

// Containerd is the Runtime of a containerd node. Listing, status, exec (preStop hooks) and
// sandboxes go through the CRI; signals go through containerd's own task API in the CRI's
// namespace, because the CRI's StopContainer sends only the signal recorded at creation (and
// containerd 1.6 records no lifecycle.stopSignal). Its client speaks containerd's 1.6 API.
type Containerd struct {
	cri    internalapi.RuntimeService
	client *containerd.Client
}

var _ Runtime = (*Containerd)(nil)

// NewContainerd connects to the containerd socket at address (a path).
func NewContainerd(ctx context.Context, address string) (*Containerd, error) {
	rt, err := cri.NewRemoteRuntimeServiceBuilder().WithEndpoint("unix://" + address).
		WithConnectionTimeout(10 * time.Second).WithTracerProvider(nil).Build(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to the CRI at %s: %w", address, err)
	}
	client, err := containerd.New(address, containerd.WithDefaultNamespace(criNamespace),
		containerd.WithTimeout(10*time.Second))
	if err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("connecting to containerd at %s: %w", address, err)
	}
	return &Containerd{cri: rt, client: client}, nil
}

// Close closes both connections.
func (c *Containerd) Close() error {
	return errors.Join(c.client.Close(), c.cri.Close(context.Background()))
}

// PodContainers lists the pod's containers through the CRI, by the kubelet's pod-UID label.
func (c *Containerd) PodContainers(ctx context.Context, podUID string) ([]Container, error) {
	list, err := c.cri.ListContainers(ctx, &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{labelPodUID: podUID},
	})
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	out := make([]Container, 0, len(list))
	for _, ctr := range list {
		out = append(out, Container{ID: ctr.Id, Name: ctr.Labels[labelContainerName], State: criState(ctr.State)})
	}
	return out, nil
}

// criMetadataExtension is the extension in which containerd's CRI plugin keeps a container's
// metadata (pkg/cri/store/container.Metadata, JSON versioned "v1"), with the STOPSIGNAL it read
// from the container's image when it created the container.
const criMetadataExtension = "io.cri-containerd.container.metadata"

// ImageStopSignal is the image's STOPSIGNAL that the CRI's StopContainer (the kubelet's stop)
// sends the container: the one the CRI recorded when it created the container (containerd
// 1.2 and later; "" for an image without one). The image a container's record names is
// looked up by its name, which another image may carry by now (a tag pulled again with another
// STOPSIGNAL): it is read only for a container without the CRI's record.
func (c *Containerd) ImageStopSignal(ctx context.Context, containerID string) (string, error) {
	ctr, err := c.client.LoadContainer(ctx, containerID)
	if err != nil {
		return "", fmt.Errorf("loading container %s: %w", containerID, notFound(err))
	}
	info, err := ctr.Info(ctx, containerd.WithoutRefreshedMetadata)
	if err != nil {
		return "", fmt.Errorf("loading container %s: %w", containerID, notFound(err))
	}
	if ext, ok := info.Extensions[criMetadataExtension]; ok && ext != nil {
		if sig, ok := criStopSignal(ext.GetValue()); ok {
			return sig, nil
		}
	}
	img, err := ctr.Image(ctx)
	if err != nil {
		return "", fmt.Errorf("loading image of container %s: %w", containerID, err)
	}
	spec, err := img.Spec(ctx)
	if err != nil {
		return "", fmt.Errorf("reading image config of container %s: %w", containerID, err)
	}
	return spec.Config.StopSignal, nil
}

// criStopSignal reads the STOPSIGNAL from the CRI's container metadata; false when data is
// not metadata of the version the CRI writes.
func criStopSignal(data []byte) (string, bool) {
	var m struct {
		Version  string
		Metadata struct{ StopSignal string }
	}
	if err := json.Unmarshal(data, &m); err != nil || m.Version != "v1" {
		return "", false
	}
	return m.Metadata.StopSignal, true
}

// Exec runs cmd through the CRI's ExecSync with no timeout of its own: ctx bounds it.
func (c *Containerd) Exec(ctx context.Context, containerID string, cmd []string) error {
	if _, _, err := c.cri.ExecSync(ctx, containerID, cmd, 0); err != nil {
		return fmt.Errorf("running %q in container %s: %w", cmd, containerID, notFound(err))
	}
	return nil
}

// PreventRestart sets containerd's restart-monitor label, when a container has one, to
// "stopped", so that the monitor leaves the container down. CRI containers normally have none.
func (c *Containerd) PreventRestart(ctx context.Context, containerID string) (bool, error) {
	ctr, err := c.client.LoadContainer(ctx, containerID)
	if err != nil {
		return false, fmt.Errorf("loading container %s: %w", containerID, notFound(err))
	}
	labels, err := ctr.Labels(ctx)
	if err != nil {
		return false, fmt.Errorf("reading labels of container %s: %w", containerID, err)
	}
	if s, ok := labels[restart.StatusLabel]; !ok || s == "stopped" {
		return false, nil
	}
	if _, err := ctr.SetLabels(ctx, map[string]string{restart.StatusLabel: "stopped"}); err != nil {
		return false, fmt.Errorf("stopping restarts of container %s: %w", containerID, err)
	}
	return true, nil
}

// Signal sends sig to the container's init process through its task; SIGKILL goes to every
// process of the container.
func (c *Containerd) Signal(ctx context.Context, containerID string, sig syscall.Signal) error {
	ctr, err := c.client.LoadContainer(ctx, containerID)
	if err != nil {
		return fmt.Errorf("loading container %s: %w", containerID, notFound(err))
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		return fmt.Errorf("loading task of container %s: %w", containerID, notFound(err))
	}
	var opts []containerd.KillOpts
	if sig == syscall.SIGKILL {
		opts = append(opts, containerd.WithKillAll)
	}
	if err := task.Kill(ctx, sig, opts...); err != nil {
		return fmt.Errorf("sending %s to container %s: %w", SignalName(sig), containerID, notFound(err))
	}
	return nil
}

// Status reads the container's state back through the CRI.
func (c *Containerd) Status(ctx context.Context, containerID string) (ContainerStatus, error) {
	resp, err := c.cri.ContainerStatus(ctx, containerID, false)
	if err != nil {
		return ContainerStatus{}, fmt.Errorf("reading status of container %s: %w", containerID, notFound(err))
	}
	s := resp.GetStatus()
	st := ContainerStatus{State: criState(s.GetState()), ExitCode: s.GetExitCode()}
	if s.GetFinishedAt() > 0 {
		st.FinishedAt = time.Unix(0, s.GetFinishedAt())
	}
	return st, nil
}

// StopPodSandboxes stops the pod's sandboxes through the CRI and counts those still ready.
func (c *Containerd) StopPodSandboxes(ctx context.Context, podUID string) (int, error) {
	filter := &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelPodUID: podUID}}
	list, err := c.cri.ListPodSandbox(ctx, filter)
	if err != nil {
		return 0, fmt.Errorf("listing sandboxes: %w", err)
	}
	for _, sb := range list {
		if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		if err := c.cri.StopPodSandbox(ctx, sb.Id); err != nil {
			return 0, fmt.Errorf("stopping sandbox %s: %w", sb.Id, err)
		}
	}
	if list, err = c.cri.ListPodSandbox(ctx, filter); err != nil {
		return 0, fmt.Errorf("listing sandboxes: %w", err)
	}
	ready := 0
	for _, sb := range list {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			ready++
		}
	}
	return ready, nil
}

func criState(s runtimeapi.ContainerState) ContainerState {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return StateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return StateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return StateExited
	}
	return StateUnknown
}

// notFound marks containerd's and the CRI's not-found errors with ErrNotFound.
func notFound(err error) error {
	if errdefs.IsNotFound(err) || status.Code(err) == codes.NotFound {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}
