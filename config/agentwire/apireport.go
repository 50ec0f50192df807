package agentwire

import (
	"encoding/json"
	"fmt"
	"time"
)

// APIReport is an agent's answer to a Command that reached it through the API server: the JSON
// the agent writes into its NodeFence's palisade.dev/executor-status annotation. It carries
// what a heartbeat carries for the direct channel: the executor status and the runtime's own
// read-back, taken when the report was written.
type APIReport struct {
	Executor ExecutorStatus `json:"executor"`
	// RunningContainers is the runtime read-back when the report was written: how many
	// workload containers have not exited; nil when the agent could not read the runtime.
	RunningContainers *int `json:"runningContainers,omitempty"`
	// ReportedAt is the agent's clock when writing.
	ReportedAt time.Time `json:"reportedAt,omitzero"`
}

// ParseAPIReport reads and checks an APIReport annotation.
func ParseAPIReport(s string) (APIReport, error) {
	var r APIReport
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return APIReport{}, fmt.Errorf("executor status annotation is not an agent report: %w", err)
	}
	if err := r.Executor.Validate(); err != nil {
		return APIReport{}, err
	}
	if r.RunningContainers != nil && *r.RunningContainers < 0 {
		return APIReport{}, fmt.Errorf("executor status of command %s: negative running containers", r.Executor.ID)
	}
	return r, nil
}

// ParseCommand reads and checks a Command annotation.
func ParseCommand(s string) (Command, error) {
	var c Command
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return Command{}, fmt.Errorf("executor command annotation is not a command: %w", err)
	}
	return c, c.Validate()
}
