package sim

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Shrinking: a failed run's operations and faults, as drawn from its
// seed, are replayed in part (Config.Script) to find a short list that
// still fails the same way — delta debugging (ddmin) over the list, each
// candidate run up to Tries times, since a replay follows the seed's
// schedule of operations and faults but not Go's scheduler.

// Shrinker shrinks a failed run's script.
type Shrinker struct {
	Cfg      Config // the failed run's (Script is set per candidate)
	Class    string // the violation's class (see ClassOf)
	Tries    int    // runs of a candidate before it counts as passing
	First    int    // runs of the whole list before shrinking gives up
	Deadline time.Time
	// Run runs one simulation (in a bubble of its own) and returns its
	// violation.
	Run func(Config) error

	Runs int // simulations run
}

var digits = regexp.MustCompile(`[0-9]`)

// ClassOf returns what kind of violation err is: its words without the
// key, the numbers and the names, so that a shrunk run that breaks the
// same invariant on another key or at another time counts as failing.
func ClassOf(err error) string {
	var v *Violation
	if !errors.As(err, &v) {
		return ""
	}
	what := v.What
	if i := strings.Index(what, ": "); strings.HasPrefix(what, "key ") && i > 0 {
		what = what[i+2:]
	}
	var out []string
	for _, w := range strings.Fields(what) {
		if digits.MatchString(w) || strings.ContainsAny(w, "/()\"") {
			continue
		}
		out = append(out, strings.Trim(w, ":,"))
		if len(out) == 4 {
			break
		}
	}
	return strings.Join(out, " ")
}

// fails runs s up to Tries times and reports whether one failed with the
// class.
func (sh *Shrinker) fails(s *Script, tries int) bool {
	for range tries {
		if time.Now().After(sh.Deadline) {
			return false
		}
		cfg := sh.Cfg
		cfg.Script = s
		sh.Runs++
		if err := sh.Run(cfg); err != nil && ClassOf(err) == sh.Class {
			return true
		}
	}
	return false
}

// Prefix returns the part of the drawn script that began by at (the
// violation's time).
func Prefix(s *Script, at time.Duration) *Script {
	out := &Script{}
	for _, o := range s.Ops {
		if o.At <= at {
			out.Ops = append(out.Ops, o)
		}
	}
	for _, f := range s.Faults {
		if f.At <= at {
			out.Faults = append(out.Faults, f)
		}
	}
	return out
}

// Shrink returns the shortest part of s it found that still fails, and
// whether s itself failed again when replayed (if not, it returns nil).
func (sh *Shrinker) Shrink(s *Script) *Script {
	if !sh.fails(s, max(sh.First, sh.Tries)) {
		return nil
	}
	n := len(s.Ops) + len(s.Faults)
	items := make([]int, n)
	for i := range items {
		items[i] = i
	}
	pick := func(idx []int) *Script {
		out := &Script{}
		for _, i := range idx {
			if i < len(s.Ops) {
				out.Ops = append(out.Ops, s.Ops[i])
			} else {
				out.Faults = append(out.Faults, s.Faults[i-len(s.Ops)])
			}
		}
		return out
	}
	// ddmin: remove chunks of the list (a half, a quarter, ...) while
	// the rest still fails.
	chunks := 2
	for len(items) >= 2 && time.Now().Before(sh.Deadline) {
		size := (len(items) + chunks - 1) / chunks
		reduced := false
		for start := 0; start < len(items); start += size {
			end := min(start+size, len(items))
			rest := append(append([]int(nil), items[:start]...), items[end:]...)
			if len(rest) > 0 && sh.fails(pick(rest), sh.Tries) {
				items = rest
				chunks = max(chunks-1, 2)
				reduced = true
				break
			}
		}
		if !reduced {
			if chunks >= len(items) {
				break
			}
			chunks = min(chunks*2, len(items))
		}
	}
	return pick(items)
}

// Format lists a script, one operation or fault a line, in time order.
func (s *Script) Format() string {
	type line struct {
		at time.Duration
		s  string
	}
	var lines []line
	for _, o := range s.Ops {
		lines = append(lines, line{o.At, "op    " + o.String()})
	}
	for _, f := range s.Faults {
		lines = append(lines, line{f.At, "fault " + f.String()})
	}
	for i := 1; i < len(lines); i++ { // insertion sort: stable, short lists
		for j := i; j > 0 && lines[j].at < lines[j-1].at; j-- {
			lines[j], lines[j-1] = lines[j-1], lines[j]
		}
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "  %s\n", l.s)
	}
	return b.String()
}
