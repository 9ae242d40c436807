package testkit

import (
	"sync"
	"testing"
)

// Ports hands out free loopback TCP ports, never the same one twice. Ports
// taken together but bound later, by processes started after, must differ:
// separate FreePort calls do not promise that (a port closed a moment ago
// is often the next one the kernel offers).
type Ports struct {
	tb   testing.TB
	mu   sync.Mutex
	seen map[int]bool
}

// NewPorts is a Ports for tb.
func NewPorts(tb testing.TB) *Ports { return &Ports{tb: tb, seen: map[int]bool{}} }

// Next is a port that was free a moment ago and that p has not given before.
func (p *Ports) Next() int {
	p.tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for range 100 {
		if port := FreePort(p.tb); !p.seen[port] {
			p.seen[port] = true
			return port
		}
	}
	p.tb.Fatal("no new free port in 100 tries")
	return 0
}
