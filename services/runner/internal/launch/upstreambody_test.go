package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testmcp"
)

// An HTTP upstream answers go-sdk's tools/list (the runner's listTools at
// start and on list_changed, and the rpc subject's methods) with a JSON body
// far over the 16 MiB the runner holds any one message to: go-sdk reads a
// JSON answer whole, so the transport ends it at the limit, with an error.
func TestUpstreamAnswerHeldToTheLimit(t *testing.T) {
	const pad = 256 << 20 // 256 MiB of JSON whitespace before the response
	var served atomic.Int64
	url := testmcp.ServeHTTP(t, "web", nil, testmcp.AnswerMethod("tools/list", func(w http.ResponseWriter, r *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Mcp-Session-Id", r.Header.Get("Mcp-Session-Id"))
		chunk := bytes.Repeat([]byte(" "), 1<<20)
		for i := 0; i < pad>>20; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			served.Add(int64(len(chunk)))
		}
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"tools":[]}}`))
	}))
	sess, _ := connectHTTP(t, url, Options{}, func(ht *HTTPTransport) { ht.DisableStandaloneSSE = true })
	var peak atomic.Uint64
	stop := make(chan struct{})
	go func() {
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := sess.ListTools(ctx, nil)
	close(stop)
	t.Logf("tools/list: err=%v; upstream sent %d MiB; peak heap in use %d MiB", err, served.Load()>>20, peak.Load()>>20)
	if err == nil {
		t.Error("a 256 MiB answer was taken")
	}
	if peak.Load() > 100<<20 {
		t.Errorf("one upstream response held %d MiB of the runner's heap (the limit: 16 MiB a message)", peak.Load()>>20)
	}
}

// An error answer that calls itself an event stream is no stream: go-sdk
// reads the body of any non-2xx answer whole (for a JSON-RPC error in it),
// so the transport holds it to the limit like any other body.
func TestUpstreamErrorStreamHeldToTheLimit(t *testing.T) {
	const most = 256 << 20
	var served atomic.Int64
	url := testmcp.ServeHTTP(t, "web", nil, testmcp.AnswerMethod("tools/list", func(w http.ResponseWriter, r *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusBadRequest)
		chunk := bytes.Repeat([]byte(": padding\n"), 1<<20/10)
		for served.Load() < most {
			n, err := w.Write(chunk)
			served.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	sess, _ := connectHTTP(t, url, Options{}, func(ht *HTTPTransport) { ht.DisableStandaloneSSE = true })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := sess.ListTools(ctx, nil)
	t.Logf("tools/list: err=%v; upstream sent %d MiB", err, served.Load()>>20)
	if err == nil {
		t.Error("an error answer was taken as tools")
	}
	if served.Load() >= most {
		t.Errorf("the runner read the whole %d MiB error body (the limit: 16 MiB a message)", most>>20)
	}
}
