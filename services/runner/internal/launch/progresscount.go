package launch

import (
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// progressCount counts the progress notifications go-sdk has read from a
// connection. go-sdk hands notifications to its handlers on a queue of
// their own, while a call's response returns at once: the runner compares
// this count with the notifications its handler has seen, so that every
// notification read before a response is forwarded before its reply.
type progressCount struct{ n atomic.Uint64 }

func (p *progressCount) note(msg jsonrpc.Message) {
	if r, ok := msg.(*jsonrpc.Request); ok && !r.ID.IsValid() && r.Method == "notifications/progress" {
		p.n.Add(1)
	}
}

// ProgressRead is how many progress notifications go-sdk has read.
func (p *progressCount) ProgressRead() uint64 { return p.n.Load() }

// ProgressRead is how many progress notifications go-sdk has read from the
// server's stdio.
func (c *StdioConn) ProgressRead() uint64 { return c.progress.ProgressRead() }

// ProgressRead is how many progress notifications go-sdk has read from the
// server's streams.
func (c *HTTPConn) ProgressRead() uint64 { return c.progress.ProgressRead() }
