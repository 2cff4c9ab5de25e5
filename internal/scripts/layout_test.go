package scripts_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// luaStrings returns the double-quoted string literals of a Lua source's
// code (its -- comments left out).
func luaStrings(src string) []string {
	src = regexp.MustCompile(`--[^\n]*`).ReplaceAllString(src, "")
	var out []string
	for _, m := range regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`).FindAllStringSubmatch(src, -1) {
		out = append(out, m[1])
	}
	return out
}

// The names the Lua scripts spell themselves are the layout package's:
// every string literal of every script is a Redis command (upper case),
// an op of the script's own protocol, a number, "", an error reply of its
// own ("ERR quorumlock: ...", "WRONGTYPE quorumlock: ...") or a name of package
// layout (TermPrefix for an election's term), and
// rw.lua spells every field of the read-write hash. Every other name (lock
// keys, companion keys, channels) reaches the scripts through KEYS[] and
// ARGV[], made by package layout.
func TestScripts_spellTheLayoutsNames(t *testing.T) {
	names := []string{keys.ReaderPrefix, keys.WriterPrefix, keys.IntentField, keys.IntentExpiryField}
	spelled := append(slices.Clip(names), keys.TermPrefix, // the election's term field: fence_commit_term.lua, leader_read.lua
		keys.NoticeSep,                                       // release.lua's notice
		keys.HoldIDPattern,                                   // reentrant.lua's hold ids
		keys.MarkerPrefix, keys.HeirMark, keys.CandidateMark) // a plain lock's line: its marker, its notices
	ops := []string{"acquire", "extend", "release", "read", "write", "extend-read", "extend-write",
		"release-read", "release-write", "leave", scripts.MetaSet, scripts.MetaKeep, scripts.MetaDrop,
		"string", // a key's type, as TYPE names it (leader_read.lua)
		"table"}  // a Lua value's type, as type() names it (a pcall's error: meta_head.lua)
	command := regexp.MustCompile(`^[A-Z]+$`)
	number := regexp.MustCompile(`^-?(inf|[0-9]+)$`)
	for _, s := range append(slices.Clip(scripts.All), scripts.LeaderRead) {
		for _, lit := range luaStrings(s.Source()) {
			if lit == "" || strings.HasPrefix(lit, "ERR quorumlock: ") || strings.HasPrefix(lit, "WRONGTYPE quorumlock: ") || command.MatchString(lit) || number.MatchString(lit) || slices.Contains(ops, lit) || slices.Contains(spelled, lit) {
				continue
			}
			t.Errorf("%s.lua spells %q, which package layout does not name", s.Name(), lit)
		}
	}
	rw := luaStrings(scripts.RW.Source())
	for _, n := range names {
		if !slices.Contains(rw, n) {
			t.Errorf("rw.lua does not spell the layout's %q", n)
		}
	}
	// rw.lua cuts the prefixes by length: string.sub(f, 1, 2) and
	// string.sub(f, 3).
	if len(keys.ReaderPrefix) != 2 || len(keys.WriterPrefix) != 2 ||
		!strings.Contains(scripts.RW.Source(), "string.sub(f, 1, 2)") || !strings.Contains(scripts.RW.Source(), "string.sub(f, 3)") {
		t.Error("rw.lua and the layout disagree on the length of the holder prefixes")
	}
}
