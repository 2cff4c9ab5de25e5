package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// errorLog counts the failed lock and unlock calls of every cell the
// bench ran, named by the cell's key (which names the library).
type errorLog struct {
	mu    sync.Mutex
	cells []cellErrors
}

// cellErrors is one cell's count of errors.
type cellErrors struct {
	cell     string
	cycles   int
	acq, rel int
	samples  []string
}

// note records r, the outcome of the cell named cell. A nil log records
// nothing.
func (l *errorLog) note(cell string, r *result) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cells = append(l.cells, cellErrors{cell: cell, cycles: r.cycles, acq: r.acqFailures, rel: r.relFailures, samples: slices.Clone(r.samples)})
}

// ours reports whether the cell is one of quorumlock's (its key names
// the library).
func (c *cellErrors) ours() bool { return strings.Contains(c.cell, qlName) }

// total returns how many errors quorumlock's cells had, and in how many
// of its cells.
func (l *errorLog) total() (errs, cells int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.cells {
		if c.ours() && c.acq+c.rel > 0 {
			errs += c.acq + c.rel
			cells++
		}
	}
	return errs, cells
}

// section lists every cell with errors, quorumlock's and the peers', with
// its first errors, and records quorumlock's total for its target.
func (l *errorLog) section(m map[string]float64) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	b.WriteString("## Errors\n\n")
	fmt.Fprintf(&b, "Every cell counts its failed lock calls (while the cell ran) and its failed unlock calls (for quorumlock: a release not confirmed, or of a lock not held). "+
		"%d cells ran (warm-up turns included).", len(l.cells))
	var bad []cellErrors
	ours := 0
	for _, c := range l.cells {
		if c.acq+c.rel > 0 {
			bad = append(bad, c)
			if c.ours() {
				ours += c.acq + c.rel
			}
		}
	}
	m["errors "+qlName] = float64(ours)
	if len(bad) == 0 {
		b.WriteString(" None had an error.\n\n")
		return b.String()
	}
	b.WriteString(" These had errors:\n\n| cell | cycles | failed locks | failed unlocks | first errors |\n|---|---|---|---|---|\n")
	for _, c := range bad {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s |\n", c.cell, c.cycles, c.acq, c.rel, strings.ReplaceAll(strings.Join(c.samples, "<br>"), "|", "\\|"))
	}
	b.WriteString("\n")
	return b.String()
}
