package runner_test

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// slowLink forwards TCP connections to a NATS server and holds every byte
// the server sends back for delay: requests arrive at once, their answers
// late, as from a JetStream whose CPU is starved.
type slowLink struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // nanoseconds

	mu    sync.Mutex
	conns []net.Conn
}

func startSlowLink(t *testing.T, natsURL string) *slowLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &slowLink{ln: ln, target: strings.TrimPrefix(natsURL, "nats://")}
	go l.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, c := range l.conns {
			_ = c.Close()
		}
	})
	return l
}

func (l *slowLink) URL() string { return "nats://" + l.ln.Addr().String() }

func (l *slowLink) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, c, u)
		l.mu.Unlock()
		go pipe(u, c, nil)
		go pipe(c, u, &l.delay)
	}
}

// pipe copies src to dst, each chunk delay after it was read (in order).
func pipe(dst, src net.Conn, delay *atomic.Int64) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	chunks := make(chan chunk, 4096)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				due := time.Now()
				if delay != nil {
					due = due.Add(time.Duration(delay.Load()))
				}
				chunks <- chunk{due, buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		time.Sleep(time.Until(c.due))
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	_ = dst.Close()
}

// TestSlowBusTakesAndKeepsLeases: while every JetStream answer reaches a
// runner later than a third of its lease (a starved CPU, an R3 write under
// load), the runner still takes the leases another runner handed over and
// keeps renewing them. A lease write was one try of LeaseTTL/3 before: it
// timed out though the stream had applied it, the runner held a lease it did
// not know of, the lease lapsed, and the servers stayed unowned for as long
// as the bus was slow.
func TestSlowBusTakesAndKeepsLeases(t *testing.T) {
	const ttl = 3 * time.Second
	const delay = 1200 * time.Millisecond // > ttl/3, < ttl
	opts := ownershipOpts("r1")
	opts.LeaseTTL = ttl
	e := runnertest.Start(t, opts)
	names := []string{"s1", "s2"}
	putEager(t, e, names...)
	waitAllRunning(t, e, names, 15*time.Second)

	link := startSlowLink(t, e.NS.ClientURL())
	nc, err := nats.Connect(link.URL(), nats.Name("r2"), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	opts2 := ownershipOpts("r2")
	opts2.LeaseTTL = ttl
	r2, err := runner.New(nc, opts2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r2.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("r2 did not stop within 30s")
		}
	})
	select {
	case <-r2.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("r2 not ready within 10s")
	}

	link.delay.Store(int64(delay))
	begin := time.Now()
	e.StopRunner(t) // r1 hands both servers over at once
	deadline := begin.Add(20 * time.Second)
	for _, n := range names {
		for holder(e, n) != "r2" {
			if time.Now().After(deadline) {
				t.Fatalf("%s's lease not taken by r2 within %s while its answers lag %s: %s", n, deadline.Sub(begin), delay, lease(e, n))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("r2 holds both leases %s after r1 stopped (every answer %s late, lease %s)", time.Since(begin).Round(time.Millisecond), delay, ttl)

	// Kept: over two lease periods r2 goes on renewing both (the bucket's
	// TTL would have dropped a lease r2 did not know it held).
	revs := map[string]uint64{}
	for _, n := range names {
		revs[n] = leaseRev(t, e, n, "r2")
	}
	time.Sleep(2 * ttl)
	for _, n := range names {
		if rev := leaseRev(t, e, n, "r2"); rev <= revs[n] {
			t.Fatalf("%s's lease not renewed over %s (revision %d, then %d)", n, 2*ttl, revs[n], rev)
		}
	}
}

// lease is the value of server n's lease (replica 0), or why there is none.
func lease(e *runnertest.Env, n string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	en, err := e.Assets.Owners.Get(ctx, "server."+n+".0")
	if err != nil {
		return err.Error()
	}
	return string(en.Value())
}

// holder is the runner holding server n's lease ("" when none does).
func holder(e *runnertest.Env, n string) string {
	var v struct {
		Runner string `json:"runner"`
	}
	_ = json.Unmarshal([]byte(lease(e, n)), &v)
	return v.Runner
}

// leaseRev is the revision of n's lease, which runner id must hold.
func leaseRev(t *testing.T, e *runnertest.Env, n, id string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	en, err := e.Assets.Owners.Get(ctx, "server."+n+".0")
	if err != nil {
		t.Fatalf("%s's lease: %v", n, err)
	}
	var v struct {
		Runner string `json:"runner"`
	}
	if err := json.Unmarshal(en.Value(), &v); err != nil || v.Runner != id {
		t.Fatalf("%s's lease %s, want held by %s", n, en.Value(), id)
	}
	return en.Revision()
}
