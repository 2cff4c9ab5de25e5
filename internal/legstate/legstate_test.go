package legstate

import "testing"

// Every transition of a leg, legal and illegal: the pairs listed are the
// legal ones, every other pair of a state and an event must leave the
// leg where it was and report false.
func TestLegNext_everyStateAndEvent(t *testing.T) {
	type pair struct {
		s State
		e Event
	}
	legal := map[pair]State{
		{Idle, EvWait}:          Waiting,
		{Idle, EvSend}:          Sent,
		{Idle, EvHand}:          Handing,
		{Waiting, EvSend}:       Sent,
		{Waiting, EvHand}:       Handing,
		{Waiting, EvGiveUp}:     GaveUp,
		{Waiting, EvSkip}:       EndedUnsent,
		{GaveUp, EvWaitsOver}:   EndedUnsent,
		{Handing, EvHanded}:     Sent,
		{Handing, EvAnswer}:     Answered,
		{Sent, EvAnswer}:        Answered,
		{Sent, EvRollback}:      Rolling,
		{Answered, EvEnd}:       Ended,
		{Answered, EvRollback}:  Rolling,
		{Answered, EvHanded}:    Answered, // answered before the hand-over returned
		{Rolling, EvHanded}:     Rolling,
		{Rolling, EvAnswer}:     Rolling, // the SET's answer after its rollback was queued
		{Rolling, EvRolledBack}: Ended,
		{Ended, EvHanded}:       Ended,
		{Ended, EvAnswer}:       Ended, // Close completed the rollback before the SET
	}
	for s := Idle; s < numStates; s++ {
		for e := EvWait; e < numEvents; e++ {
			got, ok := Next(s, e)
			want, wantOK := legal[pair{s, e}]
			if !wantOK {
				want = s
			}
			if ok != wantOK || got != want {
				t.Errorf("%s --%s--> %s, %v; want %s, %v", s, e, got, ok, want, wantOK)
			}
		}
	}
	for s := Idle; s < numStates; s++ {
		if s.String() == "invalid" {
			t.Errorf("state %d has no name", s)
		}
	}
	for e := EvWait; e < numEvents; e++ {
		if e.String() == "invalid" {
			t.Errorf("event %d has no name", e)
		}
	}
}

// The ended states are final: no event but the late ones listed in
// Next moves a leg out of them, and none moves it back to sending.
func TestLegNext_endedStatesAreFinal(t *testing.T) {
	for _, s := range []State{Ended, EndedUnsent} {
		for e := EvWait; e < numEvents; e++ {
			if got, _ := Next(s, e); got != s {
				t.Errorf("%s --%s--> %s: an ended leg moved on", s, e, got)
			}
		}
	}
}

// SentOnce holds from the hand-over on, never before nor for a leg that
// ended unsent.
func TestLegState_sentOnce(t *testing.T) {
	want := map[State]bool{Handing: true, Sent: true, Answered: true, Rolling: true, Ended: true}
	for s := Idle; s < numStates; s++ {
		if s.SentOnce() != want[s] {
			t.Errorf("%s.SentOnce() = %v, want %v", s, s.SentOnce(), want[s])
		}
	}
}
