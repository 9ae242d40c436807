package runner

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/services/runner/internal/launch"
)

// readCount is a RawConn that has read n progress notifications.
type readCount struct{ n atomic.Uint64 }

func (r *readCount) CallTool(context.Context, string, json.RawMessage, []byte) (json.RawMessage, launch.RawID, error) {
	return nil, 0, nil
}
func (r *readCount) HasRequestMeta() bool { return false }
func (r *readCount) ProgressRead() uint64 { return r.n.Load() }

// A reply waits until the handler has seen every progress notification
// go-sdk read before the response, however late go-sdk's queue hands the
// last one over (it was the last notification's publish coming after the
// reply, under load, that lost it).
func TestSettleWaitsForReadProgress(t *testing.T) {
	s := &server{}
	sess := liveSession{ClientSession: &mcp.ClientSession{}, raw: &readCount{}}
	sess.raw.(*readCount).n.Store(2)
	seen := s.progressCounter(sess.ClientSession)
	seen.Add(1) // one handled, one still in go-sdk's queue
	go func() {
		time.Sleep(150 * time.Millisecond)
		seen.Add(1)
	}()
	start := time.Now()
	(&progressTarget{}).settle(s.progressCaughtUp(sess))
	if d := time.Since(start); d < 140*time.Millisecond || d > progressSettleMax {
		t.Fatalf("settled after %s, want once the second notification was handled (150 ms)", d)
	}
	// Caught up: no wait at all.
	start = time.Now()
	(&progressTarget{}).settle(s.progressCaughtUp(sess))
	if d := time.Since(start); d > 20*time.Millisecond {
		t.Fatalf("settled after %s with nothing to wait for", d)
	}
}
