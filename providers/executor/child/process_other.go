//go:build !linux

package child

import "os/exec"

// setParentDeathSignal does nothing where there is no parent-death signal: the executor ends
// when its stdin closes, which the agent's death also does.
func setParentDeathSignal(*exec.Cmd) {}
