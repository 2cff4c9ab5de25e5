// Package legstate holds the states of a leg (one master's share of a
// round) and its one transition function: which event may happen in
// which state, and the state it leads to ("Leg states" in
// docs/design.md). It is data and a pure function: it keeps no leg, takes
// no lock and does no I/O; the core keeps each leg's state under its
// round's lock and moves it on only through Next. It imports nothing.
package legstate

// State is where a leg is in its life. Its only changes are the
// transitions of Next, made under the leg's round's lock. Besides its
// state a leg holds its master's vote (0 until it is known), and while it
// waits to be sent, how many events it still waits for and the timer that
// gives that wait up.
//
//	from               event                  to
//	idle               wait                   waiting
//	idle, waiting      send | hand            sent | handing
//	handing            handed                 sent
//	waiting            giveUp | skip          gaveUp | endedUnsent
//	gaveUp             waitsOver              endedUnsent
//	handing, sent      answer                 answered
//	answered           end                    ended
//	answered, sent     rollback               rolling
//	rolling            rolledBack             ended
//
// See "Leg states" in docs/design.md.
type State uint8

// The states of a leg; a new leg is Idle (the zero value).
const (
	Idle        State = iota // not begun
	Waiting                  // waits for earlier commands (or its lead) before it sends
	GaveUp                   // gave the wait up, unsent (its vote is a failure): ends once what it waited for has
	Handing                  // sent: the command is being handed to an Ordered transport
	Sent                     // sent, not answered
	Answered                 // answered (or failed): the vote is known
	Rolling                  // a failed acquisition's rollback was sent
	Ended                    // ended, its command sent
	EndedUnsent              // ended, nothing sent: not asked, or gave up
	numStates
)

// String names the state as docs/design.md's table does ("invalid" for a
// value that is no state).
func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case Waiting:
		return "waiting"
	case GaveUp:
		return "gave up"
	case Handing:
		return "handing"
	case Sent:
		return "sent"
	case Answered:
		return "answered"
	case Rolling:
		return "rolling back"
	case Ended:
		return "ended"
	case EndedUnsent:
		return "ended unsent"
	}
	return "invalid"
}

// Event is what happens to a leg.
type Event uint8

// The events of a leg, each with the step of the core that makes it
// happen in brackets.
const (
	EvWait       Event = iota // it must wait for earlier commands before it sends (begin)
	EvSend                    // its command goes to the transport (send)
	EvHand                    // as EvSend, to an Ordered transport for an acquisition: a rollback waits for the hand-over
	EvHanded                  // the transport took the command (send)
	EvGiveUp                  // it stops waiting: its master is down, or its wait timed out (expire)
	EvSkip                    // its lead did not grant: its master is not asked (ready)
	EvWaitsOver               // the last of what a leg that gave up waited for has ended (ready)
	EvAnswer                  // the transport completed its command (complete)
	EvEnd                     // it is done: answered, and for an acquisition, decided or refused
	EvRollback                // its failed acquisition's rollback is sent
	EvRolledBack              // the rollback was completed
	numEvents
)

// String names the event ("invalid" for a value that is no event).
func (e Event) String() string {
	switch e {
	case EvWait:
		return "wait"
	case EvSend:
		return "send"
	case EvHand:
		return "hand"
	case EvHanded:
		return "handed"
	case EvGiveUp:
		return "give up"
	case EvSkip:
		return "skip"
	case EvWaitsOver:
		return "waits over"
	case EvAnswer:
		return "answer"
	case EvEnd:
		return "end"
	case EvRollback:
		return "rollback"
	case EvRolledBack:
		return "rolled back"
	}
	return "invalid"
}

// Next is the one transition function of a leg: the state after e in
// s, and whether e may happen in s at all. An event that may not leaves
// the leg as it was (the core's leg.to reports it).
//
// Three events are taken where they find the leg further on, leaving it
// there: the hand-over of a command whose answer came first (EvHanded in
// Answered, Rolling or Ended), and the answer to an acquisition
// on an Ordered transport whose rollback was queued behind it (EvAnswer
// in Rolling, or in Ended when Close completed the rollback first).
func Next(s State, e Event) (State, bool) {
	switch e {
	case EvWait:
		if s == Idle {
			return Waiting, true
		}
	case EvSend:
		if s == Idle || s == Waiting {
			return Sent, true
		}
	case EvHand:
		if s == Idle || s == Waiting {
			return Handing, true
		}
	case EvHanded:
		switch s {
		case Handing:
			return Sent, true
		case Answered, Rolling, Ended:
			return s, true
		}
	case EvGiveUp:
		if s == Waiting {
			return GaveUp, true
		}
	case EvSkip:
		if s == Waiting {
			return EndedUnsent, true
		}
	case EvWaitsOver:
		if s == GaveUp {
			return EndedUnsent, true
		}
	case EvAnswer:
		switch s {
		case Handing, Sent:
			return Answered, true
		case Rolling, Ended:
			return s, true
		}
	case EvEnd:
		if s == Answered {
			return Ended, true
		}
	case EvRollback:
		if s == Answered || s == Sent {
			return Rolling, true
		}
	case EvRolledBack:
		if s == Rolling {
			return Ended, true
		}
	}
	return s, false
}

// SentOnce reports whether a leg in s has had its command go to its
// transport: true from the hand-over on, false before it and for a leg
// that ended unsent.
func (s State) SentOnce() bool {
	switch s {
	case Handing, Sent, Answered, Rolling, Ended:
		return true
	}
	return false
}
