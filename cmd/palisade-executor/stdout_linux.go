package main

import (
	"fmt"
	"os"
	"syscall"
)

// protocolOutput returns the process's stdout for the protocol's responses alone, and points
// file descriptor 1 at stderr, so that whatever else writes to stdout (a library's stray print)
// cannot corrupt the protocol.
func protocolOutput() (*os.File, error) {
	fd, err := syscall.Dup(1)
	if err != nil {
		return nil, fmt.Errorf("duplicating stdout: %w", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.Dup3(2, 1, 0); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("pointing stdout at stderr: %w", err)
	}
	return os.NewFile(uintptr(fd), "protocol"), nil
}
