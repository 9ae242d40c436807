package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// callEvents subscribes to the call events of server (events.call.<server>,
// the copy the audit chain gets too) until t ends; the channel holds up to
// n of them.
func callEvents(t *testing.T, e *runnertest.Env, server string, n int) <-chan model.CallEvent {
	t.Helper()
	events := make(chan model.CallEvent, n)
	sub, err := e.NC.Subscribe(bus.NewSubjects("").Event("call", server), func(m *nats.Msg) {
		var ev model.CallEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			events <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return events
}

// Plain calls to a stdio server take the raw path (their request id is one
// of the raw connection's), progress calls go-sdk's; a call's outcome is
// the same either way.
func TestRawPathChosen(t *testing.T) {
	exp, _ := recordSpans(t)
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	events := callEvents(t, e, "alpha", 16)

	if res, err := call(t, e, "alpha", "echo", `{"message":"raw"}`); err != nil || text(t, res) != "raw" {
		t.Fatalf("echo: %s %v", res, err)
	}
	res, err := call(t, e, "alpha", "fail", `{"message":"boom"}`)
	var r callResult
	if err != nil || json.Unmarshal(res, &r) != nil || !r.IsError || r.Content[0].Text != "failed: boom" {
		t.Fatalf("fail: %s %v", res, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var progress int
	var mu sync.Mutex
	res, err = e.Client.Call(ctx, "alpha", "progress", json.RawMessage(`{"steps":2}`), &client.CallOptions{
		RequestID:  "req-raw-progress",
		OnProgress: func(model.ProgressEvent) { mu.Lock(); progress++; mu.Unlock() },
	})
	if err != nil || text(t, res) != "done 2 steps" {
		t.Fatalf("progress: %s %v", res, err)
	}
	// Both before the reply, though go-sdk's client hands notifications to
	// their handler on a queue of its own (calls.go: settle).
	mu.Lock()
	if progress != 2 {
		t.Fatalf("%d progress events, want 2", progress)
	}
	mu.Unlock()

	ids := map[string]string{}
	for deadline := time.Now().Add(3 * time.Second); len(ids) < 3 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range exp.GetSpans().Snapshots() {
			if id := attr(s, "jsonrpc.request.id"); id != "" && strings.HasPrefix(s.Name(), "tools/call ") {
				ids[strings.TrimPrefix(s.Name(), "tools/call ")] = id
			}
		}
	}
	if !strings.HasPrefix(ids["echo"], "mcpbus-") || !strings.HasPrefix(ids["fail"], "mcpbus-") {
		t.Fatalf("plain calls did not take the raw path: request ids %v", ids)
	}
	if id := ids["progress"]; id == "" || strings.HasPrefix(id, "mcpbus-") {
		t.Fatalf("a progress call took the raw path: request ids %v", ids)
	}
	outcomes := map[string]string{}
	for len(outcomes) < 3 {
		select {
		case ev := <-events:
			outcomes[ev.Tool] = ev.Outcome
		case <-time.After(5 * time.Second):
			t.Fatalf("call events: %v", outcomes)
		}
	}
	if outcomes["echo"] != "ok" || outcomes["fail"] != "tool_error" || outcomes["progress"] != "ok" {
		t.Fatalf("outcomes %v", outcomes)
	}
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// Callers get the same bytes from the raw path as from go-sdk's (which
// decoded the result and encoded it again), and 100 concurrent calls each get
// their own result.
func TestRawPathSameReplies(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Runtime.MaxInflight = 128
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	calls := []struct{ tool, args string }{
		{"echo", `{"message":"hé \"quoted\" <tag> & \u2028"}`},
		{"echo", "{\n  \"message\": \"pretty\"\n}"},
		{"fail", `{"message":"x"}`},
		{"large", `{"bytes":524288}`},
		{"meta", ``},
		{"echo", `{"message":5}`}, // invalid arguments: a tool error from the server
	}
	replies := func() []string {
		var out []string
		for _, c := range calls {
			res, err := call(t, e, "alpha", c.tool, c.args)
			if err != nil {
				t.Fatalf("%s: %v", c.tool, err)
			}
			out = append(out, string(res))
		}
		return out
	}
	raw := replies()
	runner.SetRawCalls(false)
	sdk := replies()
	runner.SetRawCalls(true)
	for i := range calls {
		if calls[i].tool == "meta" {
			// Each call has its own traceparent (when spans are recorded); the rest matches.
			raw[i], sdk[i] = withoutTrace(t, raw[i]), withoutTrace(t, sdk[i])
		}
		if raw[i] != sdk[i] {
			t.Errorf("%s: raw reply\n%s\ngo-sdk reply\n%s", calls[i].tool, raw[i], sdk[i])
		}
	}

	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			msg := fmt.Sprint("concurrent ", i)
			res, err := call(t, e, "alpha", "echo", fmt.Sprintf(`{"message":%q}`, msg))
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			} else if got := text(t, res); got != msg {
				t.Errorf("call %d got %q", i, got)
			}
		})
	}
	wg.Wait()
}

// withoutTrace is the meta tool's reply with the trace context left out.
func withoutTrace(t *testing.T, reply string) string {
	var meta map[string]any
	if err := json.Unmarshal([]byte(text(t, json.RawMessage(reply))), &meta); err != nil {
		t.Fatal(err)
	}
	if meta["io.modelcontextprotocol/protocolVersion"] == nil {
		t.Errorf("the server saw no SEP-2575 _meta: %v", meta)
	}
	delete(meta, "traceparent")
	delete(meta, "tracestate")
	b, _ := json.Marshal(meta)
	return string(b)
}

// Every reply of a call says whether the result is a tool error
// (bus.HeaderToolResult), on the raw path and on go-sdk's, so that the
// gateway passes results on without decoding them again.
func TestReplySaysToolResult(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	for _, raw := range []bool{true, false} {
		runner.SetRawCalls(raw)
		for _, c := range []struct {
			tool, args string
			isError    bool
		}{{"echo", `{"message":"x"}`, false}, {"fail", `{"message":"boom"}`, true}} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err := e.Client.CallResult(ctx, "alpha", c.tool, json.RawMessage(c.args), nil)
			cancel()
			var r callResult
			if err != nil || json.Unmarshal(res.Data, &r) != nil {
				t.Fatalf("raw=%v %s: %s %v", raw, c.tool, res.Data, err)
			}
			if !res.Checked || res.IsError != c.isError || r.IsError != c.isError {
				t.Fatalf("raw=%v %s: checked %v, isError %v (result's %v), want checked and %v", raw, c.tool, res.Checked, res.IsError, r.IsError, c.isError)
			}
		}
	}
	runner.SetRawCalls(true)
}
