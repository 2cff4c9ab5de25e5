package redlock

import "testing"

// Every transition of a leg, legal and illegal: the pairs listed are the
// legal ones, every other pair of a state and an event must leave the
// leg where it was and report false.
func TestLegNext_everyStateAndEvent(t *testing.T) {
	type pair struct {
		s legState
		e legEvent
	}
	legal := map[pair]legState{
		{legIdle, evWait}:          legWaiting,
		{legIdle, evSend}:          legSent,
		{legIdle, evHand}:          legHanding,
		{legWaiting, evSend}:       legSent,
		{legWaiting, evHand}:       legHanding,
		{legWaiting, evGiveUp}:     legGaveUp,
		{legWaiting, evSkip}:       legEndedUnsent,
		{legGaveUp, evWaitsOver}:   legEndedUnsent,
		{legHanding, evHanded}:     legSent,
		{legHanding, evAnswer}:     legAnswered,
		{legSent, evAnswer}:        legAnswered,
		{legSent, evRollback}:      legRolling,
		{legAnswered, evEnd}:       legEnded,
		{legAnswered, evRollback}:  legRolling,
		{legAnswered, evHanded}:    legAnswered, // answered before the hand-over returned
		{legRolling, evHanded}:     legRolling,
		{legRolling, evAnswer}:     legRolling, // the SET's answer after its rollback was queued
		{legRolling, evRolledBack}: legEnded,
		{legEnded, evHanded}:       legEnded,
		{legEnded, evAnswer}:       legEnded, // Close completed the rollback before the SET
	}
	for s := legIdle; s < numLegStates; s++ {
		for e := evWait; e < numLegEvents; e++ {
			got, ok := legNext(s, e)
			want, wantOK := legal[pair{s, e}]
			if !wantOK {
				want = s
			}
			if ok != wantOK || got != want {
				t.Errorf("%s --%s--> %s, %v; want %s, %v", s, e, got, ok, want, wantOK)
			}
		}
	}
	for s := legIdle; s < numLegStates; s++ {
		if s.String() == "invalid" {
			t.Errorf("state %d has no name", s)
		}
	}
	for e := evWait; e < numLegEvents; e++ {
		if e.String() == "invalid" {
			t.Errorf("event %d has no name", e)
		}
	}
}

// The ended states are final: no event but the late ones listed in
// legNext moves a leg out of them, and none moves it back to sending.
func TestLegNext_endedStatesAreFinal(t *testing.T) {
	for _, s := range []legState{legEnded, legEndedUnsent} {
		for e := evWait; e < numLegEvents; e++ {
			if got, _ := legNext(s, e); got != s {
				t.Errorf("%s --%s--> %s: an ended leg moved on", s, e, got)
			}
		}
	}
}

// sentOnce holds from the hand-over on, never before nor for a leg that
// ended unsent.
func TestLegState_sentOnce(t *testing.T) {
	want := map[legState]bool{legHanding: true, legSent: true, legAnswered: true, legRolling: true, legEnded: true}
	for s := legIdle; s < numLegStates; s++ {
		if s.sentOnce() != want[s] {
			t.Errorf("%s.sentOnce() = %v, want %v", s, s.sentOnce(), want[s])
		}
	}
}
