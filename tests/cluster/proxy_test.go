package cluster

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy forwards TCP connections to a NATS node. Cut makes it a black hole:
// connections stay open but no byte passes either way, as in a network
// partition (neither side sees an error until its pings go unanswered).
// Heal closes every connection, so clients reconnect, and forwards again.
type proxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
}

// startProxy forwards to natsURL ("nats://host:port") until the test ends.
func startProxy(tb testing.TB, natsURL string) *proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &proxy{ln: ln, target: strings.TrimPrefix(natsURL, "nats://")}
	go p.serve()
	tb.Cleanup(func() {
		_ = ln.Close()
		p.closeAll()
	})
	return p
}

// URL is the proxy's client URL.
func (p *proxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go p.pipe(u, c)
		go p.pipe(c, u)
	}
}

// pipe copies from src to dst, dropping everything while cut.
func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
}

// Cut starts dropping every byte.
func (p *proxy) Cut() { p.cut.Store(true) }

// Heal closes every proxied connection and forwards again.
func (p *proxy) Heal() {
	p.cut.Store(false)
	p.closeAll()
}

func (p *proxy) closeAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}
