package redlock

// legState is where a leg (one master's share of a round) is in its life.
// Its only changes are the transitions of legNext, made under round.mu
// (leg.to). Besides its state a leg holds its master's vote (0 until it
// is known), and while it waits to be sent, how many events it still
// waits for and the timer that gives that wait up.
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
type legState uint8

const (
	legIdle        legState = iota // not begun
	legWaiting                     // waits for earlier commands (or its lead) before it sends
	legGaveUp                      // gave the wait up, unsent (voteFail): ends once what it waited for has
	legHanding                     // sent: the command is being handed to an Ordered transport
	legSent                        // sent, not answered
	legAnswered                    // answered (or failed): the vote is known
	legRolling                     // a failed acquisition's rollback was sent
	legEnded                       // ended, its command sent
	legEndedUnsent                 // ended, nothing sent: not asked, or gave up
	numLegStates
)

func (s legState) String() string {
	switch s {
	case legIdle:
		return "idle"
	case legWaiting:
		return "waiting"
	case legGaveUp:
		return "gave up"
	case legHanding:
		return "handing"
	case legSent:
		return "sent"
	case legAnswered:
		return "answered"
	case legRolling:
		return "rolling back"
	case legEnded:
		return "ended"
	case legEndedUnsent:
		return "ended unsent"
	}
	return "invalid"
}

// legEvent is what happens to a leg.
type legEvent uint8

const (
	evWait       legEvent = iota // it must wait for earlier commands before it sends (begin)
	evSend                       // its command goes to the transport (send)
	evHand                       // as evSend, to an Ordered transport for an acquisition: a rollback waits for the hand-over
	evHanded                     // the transport took the command (send)
	evGiveUp                     // it stops waiting: its master is down, or its wait timed out (expire)
	evSkip                       // its lead did not grant: its master is not asked (ready)
	evWaitsOver                  // the last of what a leg that gave up waited for has ended (ready)
	evAnswer                     // the transport completed its command (complete)
	evEnd                        // it is done: answered, and for an acquisition, decided or refused
	evRollback                   // its failed acquisition's rollback is sent
	evRolledBack                 // the rollback was completed
	numLegEvents
)

func (e legEvent) String() string {
	switch e {
	case evWait:
		return "wait"
	case evSend:
		return "send"
	case evHand:
		return "hand"
	case evHanded:
		return "handed"
	case evGiveUp:
		return "give up"
	case evSkip:
		return "skip"
	case evWaitsOver:
		return "waits over"
	case evAnswer:
		return "answer"
	case evEnd:
		return "end"
	case evRollback:
		return "rollback"
	case evRolledBack:
		return "rolled back"
	}
	return "invalid"
}

// legNext is the one transition function of a leg: the state after e in
// s, and whether e may happen in s at all. An event that may not leaves
// the leg as it was (leg.to reports it).
//
// Three events are taken where they find the leg further on, leaving it
// there: the hand-over of a command whose answer came first (evHanded in
// legAnswered, legRolling or legEnded), and the answer to an acquisition
// on an Ordered transport whose rollback was queued behind it (evAnswer
// in legRolling, or in legEnded when Close completed the rollback first).
func legNext(s legState, e legEvent) (legState, bool) {
	switch e {
	case evWait:
		if s == legIdle {
			return legWaiting, true
		}
	case evSend:
		if s == legIdle || s == legWaiting {
			return legSent, true
		}
	case evHand:
		if s == legIdle || s == legWaiting {
			return legHanding, true
		}
	case evHanded:
		switch s {
		case legHanding:
			return legSent, true
		case legAnswered, legRolling, legEnded:
			return s, true
		}
	case evGiveUp:
		if s == legWaiting {
			return legGaveUp, true
		}
	case evSkip:
		if s == legWaiting {
			return legEndedUnsent, true
		}
	case evWaitsOver:
		if s == legGaveUp {
			return legEndedUnsent, true
		}
	case evAnswer:
		switch s {
		case legHanding, legSent:
			return legAnswered, true
		case legRolling, legEnded:
			return s, true
		}
	case evEnd:
		if s == legAnswered {
			return legEnded, true
		}
	case evRollback:
		if s == legAnswered || s == legSent {
			return legRolling, true
		}
	case evRolledBack:
		if s == legRolling {
			return legEnded, true
		}
	}
	return s, false
}

// to moves the leg on by e (under round.mu); it reports whether e may
// happen in the leg's state (else the leg stays as it was).
func (l *leg) to(e legEvent) bool {
	s, ok := legNext(l.state, e)
	l.state = s
	return ok
}

// sentOnce reports whether the leg's command went to its transport.
func (s legState) sentOnce() bool {
	switch s {
	case legHanding, legSent, legAnswered, legRolling, legEnded:
		return true
	}
	return false
}
