// Package masters reads the masters that the commands, the demo, the
// examples and the benchmark are pointed at.
package masters

import (
	"os"
	"strings"
)

// Env names the environment variable that lists the masters.
const Env = "REDLOCK_MASTERS"

// Split splits a comma-separated list (of host:port or redis:// URLs),
// trimming spaces and dropping empty items.
func Split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// FromEnv returns the masters listed in REDLOCK_MASTERS, or none.
func FromEnv() []string { return Split(os.Getenv(Env)) }
