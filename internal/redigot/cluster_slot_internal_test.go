package redigot

import (
	"testing"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/layout"
)

// A cluster member's Inspect routes a script call (Election.Leader's read)
// by its first key, not by the script's text.
func TestCluster_inspectRoutesScriptByFirstKey(t *testing.T) {
	const key = "{elect}:lock"
	for _, tc := range []struct {
		c    layout.Command
		want int
	}{
		{layout.Command{Name: "EVAL", Args: []any{"return { 1 }", 2, key, "{elect}:meta"}}, keys.Slot(key)},
		{layout.Command{Name: "eval", Args: []any{"return 1", int64(1), []byte(key)}}, keys.Slot(key)},
		{layout.Command{Name: "EVALSHA", Args: []any{"abc", 1, key}}, keys.Slot(key)},
		{layout.Command{Name: "EVAL", Args: []any{"return 1", 0}}, -1},
		{layout.Command{Name: "EVAL", Args: []any{"return 1", 0, "x"}}, -1},
		{layout.Command{Name: "EVAL", Args: []any{"return 1"}}, -1},
		{layout.Command{Name: "HGETALL", Args: []any{key}}, keys.Slot(key)},
	} {
		if got := inspectSlot(tc.c); got != tc.want {
			t.Errorf("%s %v: slot %d, want %d", tc.c.Name, tc.c.Args, got, tc.want)
		}
	}
}
