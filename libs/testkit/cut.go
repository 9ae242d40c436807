package testkit

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Cut is a TCP relay in front of a NATS server that a test can cut: Down
// closes every connection through it and refuses new ones until Up, as a
// node lost to the network would (the server itself runs on).
type Cut struct {
	ln     net.Listener
	target string
	down   atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

// NewCut relays a listener of its own to natsURL until the test ends.
func NewCut(tb testing.TB, natsURL string) *Cut {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	c := &Cut{ln: ln, target: strings.TrimPrefix(natsURL, "nats://")}
	go c.serve()
	tb.Cleanup(func() { _ = ln.Close(); c.closeAll() })
	return c
}

// URL is the relay's address as a NATS URL.
func (c *Cut) URL() string { return "nats://" + c.ln.Addr().String() }

// Down cuts every connection and refuses new ones.
func (c *Cut) Down() { c.down.Store(true); c.closeAll() }

// Up lets connections through again.
func (c *Cut) Up() { c.down.Store(false) }

func (c *Cut) serve() {
	for {
		in, err := c.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", c.target)
		if c.down.Load() || err != nil {
			_ = in.Close()
			if out != nil {
				_ = out.Close()
			}
			continue
		}
		c.mu.Lock()
		c.conns = append(c.conns, in, out)
		c.mu.Unlock()
		go pipe(out, in)
		go pipe(in, out)
	}
}

func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
}

func (c *Cut) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}
