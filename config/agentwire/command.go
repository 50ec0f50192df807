package agentwire

import (
	"errors"
	"fmt"
	"time"
)

// ActionTerminate orders the agent to terminate every pod of its node on the container runtime,
// as the kubelet would, after stopping the kubelet so that nothing restarts them.
const ActionTerminate = "Terminate"

// The states of an ExecutorStatus.
const (
	// ExecutorRunning: the agent is carrying the command out.
	ExecutorRunning = "Running"
	// ExecutorConfirmed: every container of every pod was read back from the runtime as
	// exited (the agent's own pod excepted).
	ExecutorConfirmed = "Confirmed"
	// ExecutorFailed: the command could not be carried out or not confirmed; Message says why.
	ExecutorFailed = "Failed"
)

// maxExecutorMessage bounds ExecutorStatus.Message, so that a status always fits a heartbeat.
const maxExecutorMessage = 4 << 10

// MaxBootID bounds a boot ID an agent reports (a Linux boot ID is a 36-byte UUID).
const MaxBootID = 64

// maxExecutorReason bounds ExecutorStatus.Reason.
const maxExecutorReason = 64

// Command is an order from the controller to one node's agent, delivered in the response to the
// agent's heartbeat until the controller clears it. The agent carries out each ID at most once:
// to retry, the controller sets a command with a new ID.
type Command struct {
	// ID names this command; the agent's ExecutorStatus carries it back.
	ID string `json:"id"`
	// Action is ActionTerminate.
	Action string `json:"action"`
	// GracePeriodSeconds, when set, caps every pod's own grace period; nil means each pod's own.
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`
	// Token is the fencing token of the NodeFence the command belongs to (its
	// status.token): the agent keeps the highest token it took, on disk, and refuses a command
	// with an older one (ReasonStaleToken), so that a late or replayed order of an earlier
	// fence is never carried out. 0: no token (a controller that hands none out).
	Token int64 `json:"token,omitempty"`
}

// ReasonStaleToken is an ExecutorStatus's Reason when the agent refused a command because its
// fencing token is older than one the agent took before.
const ReasonStaleToken = "StaleFencingToken"

// ReasonTokenNotRecorded is an ExecutorStatus's Reason when the agent refused a command because
// it could not read or record the highest fencing token it took (its state directory).
const ReasonTokenNotRecorded = "FencingTokenNotRecorded"

// Validate checks what the agent needs to carry the command out.
func (c Command) Validate() error {
	switch {
	case c.ID == "":
		return errors.New("command without ID")
	case c.Action != ActionTerminate:
		return fmt.Errorf("command %s: unknown action %q", c.ID, c.Action)
	case c.GracePeriodSeconds != nil && *c.GracePeriodSeconds < 0:
		return fmt.Errorf("command %s: negative grace period", c.ID)
	case c.Token < 0:
		return fmt.Errorf("command %s: negative fencing token", c.ID)
	}
	return nil
}

// ExecutorStatus is an agent's account of the latest command it carried out, sent with every
// heartbeat once it has received one.
type ExecutorStatus struct {
	// ID is the Command's.
	ID string `json:"id"`
	// State is ExecutorRunning, ExecutorConfirmed or ExecutorFailed.
	State string `json:"state"`
	// Reason, on a Failed status, is a CamelCase word for why, when the agent has one
	// (ReasonStaleToken); "" otherwise.
	Reason string `json:"reason,omitempty"`
	// Message says why a command failed (which containers still run, for one); on a Confirmed
	// status, what the agent did that the kubelet would not have (the pods whose grace period
	// the agent's time limit, --executor-timeout, cut), "" for nothing.
	Message string `json:"message,omitempty"`
	// Pods is how many pods were terminated and confirmed; Containers how many of their
	// containers the agent stopped (those already exited are not counted).
	Pods       int `json:"pods"`
	Containers int `json:"containers"`
	// KubeletStopped says that the agent ran its kubelet stop command, and that it succeeded,
	// before it terminated anything: no kubelet restarts what the executor stopped (unless
	// something starts the kubelet again, which the heartbeats' KubeletHealthy shows).
	KubeletStopped bool `json:"kubeletStopped,omitempty"`
	// BootID is the boot ID of the machine the agent carried the command out in (its
	// /proc/sys/kernel/random/boot_id, at most MaxBootID bytes), "" when it could not read it
	// or is older than this field. The controller records it with the order's confirmation: a
	// node back in that boot has not rebooted since the executor acted.
	BootID string `json:"bootID,omitempty"`
	// StartedAt and FinishedAt are on the agent's clock; FinishedAt is zero while running.
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// Validate checks a status received from an agent.
func (s ExecutorStatus) Validate() error {
	switch {
	case s.ID == "":
		return errors.New("executor status without command ID")
	case s.State != ExecutorRunning && s.State != ExecutorConfirmed && s.State != ExecutorFailed:
		return fmt.Errorf("executor status of command %s: unknown state %q", s.ID, s.State)
	case s.Pods < 0 || s.Containers < 0:
		return fmt.Errorf("executor status of command %s: negative counts", s.ID)
	case len(s.Reason) > maxExecutorReason:
		return fmt.Errorf("executor status of command %s: reason longer than %d bytes", s.ID, maxExecutorReason)
	case len(s.Message) > maxExecutorMessage:
		return fmt.Errorf("executor status of command %s: message longer than %d bytes", s.ID, maxExecutorMessage)
	case len(s.BootID) > MaxBootID:
		return fmt.Errorf("executor status of command %s: boot ID longer than %d bytes", s.ID, MaxBootID)
	}
	return nil
}

// TruncateMessage cuts msg to what an ExecutorStatus may carry.
func TruncateMessage(msg string) string {
	if len(msg) <= maxExecutorMessage {
		return msg
	}
	const more = "… (truncated)"
	cut := maxExecutorMessage - len(more)
	for cut > 0 && msg[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		cut--
	}
	return msg[:cut] + more
}

// Response is the JSON body of a heartbeat's 200 response: the node's pending command and the
// peers it is to probe. A 204 response means neither.
type Response struct {
	// Command is the node's pending command, nil for none.
	Command *Command `json:"command,omitempty"`
	// Peers are the nodes this node's agent is to probe until the next response says otherwise.
	Peers []PeerTarget `json:"peers,omitempty"`
	// IntervalMillis is the heartbeat (and probe) interval the node's policy asks for; 0: keep
	// the agent's own.
	IntervalMillis int64 `json:"intervalMillis,omitempty"`
	// Datagram is a new key for heartbeat datagrams, sent when the Report asked for datagrams
	// (Datagrams) and did not name the server's current key for this node.
	Datagram *DatagramKey `json:"datagram,omitempty"`
}

// DatagramKey is the secret an agent authenticates its heartbeat datagrams with (HMAC-SHA256),
// given to it over the mutually authenticated TLS channel only. It is valid until the agent's
// client certificate expires, or until the controller forgets it (a new leader knows none).
type DatagramKey struct {
	// ID names the key in every datagram (DatagramKeyIDBytes bytes).
	ID []byte `json:"id"`
	// Key is the HMAC key (DatagramKeyBytes bytes).
	Key []byte `json:"key"`
}
