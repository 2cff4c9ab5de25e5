package wake

// Releases counts the notices of the releases of one key recently
// announced, to tell a release's first notice from the others: every
// master announces each release. A release is told apart by its id, the
// first characters of the holder's token, or, for a reentrant owner's last
// release, whose token is the owner for every release, an id of its own.
// It remembers the latest few releases; the zero value is ready.
type Releases struct {
	recent [8]release // a ring
	next   int
}

// release is one release: how many masters have announced it, and
// whether the key's pilot has.
type release struct {
	id         string
	notices    int
	pilotHeard bool
}

// Heard counts a notice of release id, from the key's pilot when
// fromPilot, and returns the Notice Decide reads: its count, and whether
// the pilot's notice came before.
func (r *Releases) Heard(id string, fromPilot bool) Notice {
	for j := range r.recent {
		if e := &r.recent[j]; e.id == id {
			e.notices++
			n := Notice{Count: e.notices, FromPilot: fromPilot, PilotHeard: e.pilotHeard}
			e.pilotHeard = e.pilotHeard || fromPilot
			return n
		}
	}
	r.recent[r.next] = release{id: id, notices: 1, pilotHeard: fromPilot}
	r.next = (r.next + 1) % len(r.recent)
	return Notice{Count: 1, FromPilot: fromPilot}
}
