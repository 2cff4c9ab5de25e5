package redlock

import (
	"context"
	"time"
)

// Two addresses, one server: the Client asks each master for its run_id
// at first contact and counts a round's grants one per distinct server,
// so that a server listed under two addresses does not count twice toward
// a quorum. internal/ident does it (Client.ident); this file is the
// Client's side: the calls every path that talks to the masters makes,
// and what the probe asks of the Client (identHost). docs/design.md,
// "Counting distinct servers", gives the rules and the argument.

// identify is the first-contact check of every call that talks to the
// masters (ident.Identity.Identify): the duplicate-master error once one
// is known; it starts the probes and never waits.
func (c *Client) identify() error { return c.ident.Identify() }

// identified waits until the first probe has ended, or ctx ends, and
// returns the duplicate-master error if one is known then
// (ident.Identity.Identified).
func (c *Client) identified(ctx context.Context) error { return c.ident.Identified(ctx) }

// reprobeGranted asks again, in the background, the masters that granted
// (granted, by master) but are not identified
// (ident.Identity.ReprobeGranted).
func (c *Client) reprobeGranted(granted []bool) { c.ident.ReprobeGranted(granted) }

// identHost is the Client as the probe's host (ident.Host).
type identHost struct{ c *Client }

// AddWorker counts the probe's goroutine in c.workers (Client.addWorker):
// it takes Client.mu, under the identity's mutex.
func (h identHost) AddWorker() bool { return h.c.addWorker() }

// WorkerDone ends the probe's goroutine.
func (h identHost) WorkerDone() { h.c.workers.Done() }

// Send hands the probe's INFO to master i's transport.
func (h identHost) Send(i int, cmd *Command) { h.c.masters[i].t.Send(cmd) }

// NoteAnswer records the probe's answer as a round trip for the adaptive
// bound (stall.Bound.Note).
func (h identHost) NoteAnswer(i int, sent, now time.Time) { h.c.bound.Note(i, sent, now) }
