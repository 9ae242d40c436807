package testkit

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/embednats"
)

// Partitioned is a Cluster whose routes all pass through relays (a Cut per
// ordered pair of nodes), so that a test can cut one node off from the
// others, as a network partition would, while the node runs on and keeps
// its clients.
type Partitioned struct {
	*embednats.Cluster
	tb       testing.TB
	mu       sync.Mutex
	relays   map[[2]int]*Cut // by [from, to] node index
	isolated map[int]bool
}

// PartitionCluster starts an n-node cluster as Cluster does, its routes
// relayed. Each node advertises a route address that closes every
// connection, so no node learns another's own listener by gossip and dials
// around the relays.
func PartitionCluster(tb testing.TB, n int) *Partitioned {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("starts a %d-node cluster", n)
	}
	sink := closingListener(tb)
	p := &Partitioned{tb: tb, relays: map[[2]int]*Cut{}, isolated: map[int]bool{}}
	c, err := embednats.StartCluster(n, tb.TempDir(), func(o *embednats.Options) {
		from, _ := strconv.Atoi(strings.TrimPrefix(o.Name, "n"))
		from--
		var routes []string
		for to, r := range o.Cluster.Routes {
			u, err := url.Parse(r)
			if err != nil {
				tb.Fatal(err)
			}
			if u.Port() == strconv.Itoa(o.Cluster.Port) {
				continue
			}
			relay := NewCut(tb, u.Host)
			p.mu.Lock()
			p.relays[[2]int{from, to}] = relay
			p.mu.Unlock()
			routes = append(routes, "nats-route://"+strings.TrimPrefix(relay.URL(), "nats://"))
		}
		o.Cluster.Routes, o.Cluster.Advertise = routes, sink
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Stop)
	p.Cluster = c
	return p
}

// Isolate cuts node i's routes to every other node (its clients stay
// connected to it) and waits until it has none.
func (p *Partitioned) Isolate(i int) {
	p.tb.Helper()
	p.mu.Lock()
	p.isolated[i] = true
	for pair, r := range p.relays {
		if pair[0] == i || pair[1] == i {
			r.Down()
		}
	}
	p.mu.Unlock()
	WaitFor(p.tb, 10*time.Second, func() (bool, string) {
		return p.Nodes[i].NumRemotes() == 0, "node still has routes"
	})
}

// Heal joins node i to the nodes not isolated again and waits until it has
// routes to them all.
func (p *Partitioned) Heal(i int) {
	p.tb.Helper()
	p.mu.Lock()
	delete(p.isolated, i)
	want := 0
	for j := range p.Nodes {
		if j != i && !p.isolated[j] && p.Alive(j) {
			want++
		}
	}
	for pair, r := range p.relays {
		if (pair[0] == i && !p.isolated[pair[1]]) || (pair[1] == i && !p.isolated[pair[0]]) {
			r.Up()
		}
	}
	p.mu.Unlock()
	WaitFor(p.tb, 20*time.Second, func() (bool, string) {
		return p.Nodes[i].NumRemotes() >= want, "node not joined again yet"
	})
}

// closingListener is a loopback address whose listener closes every
// connection it accepts, until the test ends.
func closingListener(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return ln.Addr().String()
}
