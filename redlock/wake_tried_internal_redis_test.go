package redlock

import (
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// A woken attempt that ends failed hands a wake-up on, when a notice
// crossed it, only if it undid a grant (wake.Tried): an attempt the pilot
// refused asked nobody else and undid nothing; one the pilot granted and
// the others refused rolled the pilot's grant back.
func TestWake_triedUndoneOnlyWhereGranted(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 5)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			c := leadClient(t, servers, p.pipelined)
			key := "wake:tried:" + p.name
			lead := c.leadFor(key)
			if lead < 0 {
				t.Fatal("no lead among five healthy masters")
			}
			if _, err := servers[lead].Do("SET", key, "someone-else", "PX", 30000); err != nil {
				t.Fatal(err)
			}
			_, err := ledAttempt(t, c, key, 10*time.Second, lead)
			if err == nil || !refusedWhereAsked(err) {
				t.Fatalf("refused by the pilot (%v): want refused wherever asked", err)
			}

			// The pilot grants, three others refuse: the grant is undone.
			if _, err := servers[lead].Do("DEL", key); err != nil {
				t.Fatal(err)
			}
			held := 0
			for i, s := range servers {
				if i != lead && held < 3 {
					if _, err := s.Do("SET", key, "someone-else", "PX", 30000); err != nil {
						t.Fatal(err)
					}
					held++
				}
			}
			_, err = ledAttempt(t, c, key, 10*time.Second, lead)
			if err == nil || refusedWhereAsked(err) {
				t.Fatalf("granted by the pilot, refused by three (%v): want its grant undone", err)
			}
			for _, s := range servers {
				if _, err := s.Do("DEL", key); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if refusedWhereAsked(errors.New("not a quorum error")) {
		t.Error("an error that tells no master's answer counts as refused everywhere")
	}
}
