package otel

// TrackedLocks returns how many locks the observer keeps for the active
// locks gauge.
func (o *Observer) TrackedLocks() int {
	o.active.mu.Lock()
	defer o.active.mu.Unlock()
	return len(o.active.byID)
}
