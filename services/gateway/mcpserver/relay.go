package mcpserver

import "sync"

// relay runs a delivery on a goroutine of its own, one at a time, while
// there is something to deliver: a notifier that many share (a NATS
// callback every view's sessions hear from) hands its messages over and
// returns at once, and a stream slow to take them (or not read at all,
// until its write times out) holds up only its own. The owner keeps what
// waits, bounded and coalesced as its messages allow; deliver takes it.
type relay struct {
	mu      sync.Mutex
	running bool
	again   bool // kicked while running: deliver once more
}

// kick runs deliver now, or once more after the run under way (which may
// have taken what waited before the caller added to it).
func (r *relay) kick(deliver func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		r.again = true
		return
	}
	r.running = true
	go r.run(deliver)
}

func (r *relay) run(deliver func()) {
	for {
		deliver()
		r.mu.Lock()
		if !r.again {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.again = false
		r.mu.Unlock()
	}
}
