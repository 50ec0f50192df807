package child

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel kill the executor when the thread that started it ends
// (Start keeps that thread for the executor's life), so that it never outlives the agent.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
