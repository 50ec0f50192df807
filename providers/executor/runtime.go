package executor

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// ContainerState is a container's state as the runtime reports it.
type ContainerState string

const (
	StateCreated ContainerState = "Created"
	StateRunning ContainerState = "Running"
	StateExited  ContainerState = "Exited"
	StateUnknown ContainerState = "Unknown"
)

// Container is one of a pod's containers in the runtime.
type Container struct {
	ID string
	// Name is the container's name in the pod's spec (the kubelet's container-name label).
	Name  string
	State ContainerState
}

// ContainerStatus is a container's state read back from the runtime.
type ContainerStatus struct {
	State      ContainerState
	ExitCode   int32
	FinishedAt time.Time
}

// Runtime is what the executor needs from the node's container runtime.
//
// Contract: every method reads or acts on the runtime directly (no cache), so that the
// executor confirms by reading state back. Signal is idempotent, and returns an error wrapping
// ErrNotFound when the container or its process is already gone. An error from Signal or
// Exec does not mean the container is still running: the executor reads its status.
type Runtime interface {
	// PodContainers lists every container of the pod with this UID, in any state.
	PodContainers(ctx context.Context, podUID string) ([]Container, error)
	// ImageStopSignal is the STOPSIGNAL of the image the container was created from (as the
	// runtime recorded it then, whatever image its name names now), "" for none.
	ImageStopSignal(ctx context.Context, containerID string) (string, error)
	// Exec runs cmd in the container and waits for it (a preStop hook); ctx bounds it.
	Exec(ctx context.Context, containerID string, cmd []string) error
	// PreventRestart makes sure the runtime itself will not restart the container once it
	// has ended (containerd's restart monitor, for one); it reports whether it had to.
	PreventRestart(ctx context.Context, containerID string) (bool, error)
	// Signal sends sig to the container's main process; SIGKILL goes to all its processes.
	Signal(ctx context.Context, containerID string, sig syscall.Signal) error
	// Status reads the container's state back.
	Status(ctx context.Context, containerID string) (ContainerStatus, error)
	// StopPodSandboxes stops the pod's sandboxes, as the kubelet does once its containers
	// have ended, and returns how many are still ready afterwards (0 on success).
	StopPodSandboxes(ctx context.Context, podUID string) (int, error)
}

// ErrNotFound means the container, or its process, no longer exists.
var ErrNotFound = errors.New("not found")

// NotConfirmedError says that containers of a pod were still not exited when read back.
type NotConfirmedError struct {
	PodUID string
	// Running names the containers not exited, with their state.
	Running map[string]ContainerState
}

func (e *NotConfirmedError) Error() string {
	return fmt.Sprintf("pod %s: containers not exited: %v", e.PodUID, e.Running)
}

// IsNotConfirmed reports whether err says containers are still not exited.
func IsNotConfirmed(err error) bool {
	var e *NotConfirmedError
	return errors.As(err, &e)
}
