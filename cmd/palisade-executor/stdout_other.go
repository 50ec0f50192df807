//go:build !linux

package main

import "os"

// protocolOutput returns stdout, which carries the protocol's responses.
func protocolOutput() (*os.File, error) { return os.Stdout, nil }
