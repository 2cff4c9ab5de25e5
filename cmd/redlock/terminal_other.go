//go:build !linux

package main

import "io"

// isTerminal reports false off Linux: no progress bar is drawn there.
func isTerminal(io.Writer) bool { return false }
