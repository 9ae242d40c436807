package loop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/loop"
	"github.com/mcpbus/mcpbus/services/chat/results"
)

// withStore makes h's engine keep cut results in a results.Store.
func withStore(t *testing.T, h *harness, mod func(*loop.Deps)) *results.Store {
	t.Helper()
	st, err := results.Open(ctxT(t), h.js, results.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := loop.Deps{Log: h.log, Tools: h.fake, Model: newModel, Publish: h.ev.publish, CallTimeout: 5 * time.Second, Results: st}
	if mod != nil {
		mod(&d)
	}
	h.eng = loop.New(d)
	return st
}

// numbered is a text of n bytes or more whose every line differs, so a
// range read out of place shows.
func numbered(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "line %06d\n", i)
	}
	return b.String()
}

// readPart is the text of a read_result answer without its header line.
func readPart(t *testing.T, content string) string {
	t.Helper()
	head, part, ok := strings.Cut(content, "\n")
	if !ok || !strings.HasPrefix(head, "[bytes ") {
		t.Fatalf("read_result answer %q", clipped(content))
	}
	return part
}

func clipped(s string) string { return s[:min(len(s), 300)] }

func TestStoredResultReadInPages(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	st := withStore(t, h, nil)
	big := numbered(100 << 10)
	h.fake.handlers["fake__big"] = func(context.Context, json.RawMessage) (json.RawMessage, error) { return textResult(big), nil }
	page := loop.DefaultResultBudget - 100 // read_result's longest range
	pages := (len(big) + page - 1) / page
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.ToolCall{ID: "b1", Name: "fake__big", Arguments: `{}`}))
	for i := range pages {
		h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call(loop.ReadResultTool, fmt.Sprintf(`{"call_id":"b1","offset":%d}`, i*page))))
	}
	h.srv.Enqueue(llmtest.Text("read it all"))
	done, err := h.eng.RunTurn(ctxT(t), "store", h.prof, "go")
	if err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	rs := h.results(t, "store")
	if len(rs) != pages+1 {
		t.Fatalf("%d results, want %d", len(rs), pages+1)
	}
	if r := rs[0]; !r.Cut || !r.Stored || r.Full != "" || r.Size != len(big) || len(r.Content) > loop.DefaultResultBudget {
		t.Fatalf("cut result: cut=%v stored=%v full=%d size=%d content=%d", r.Cut, r.Stored, len(r.Full), r.Size, len(r.Content))
	}
	var whole strings.Builder
	for _, r := range rs[1:] {
		if r.IsError {
			t.Fatalf("read_result failed: %s", r.Content)
		}
		whole.WriteString(readPart(t, r.Content))
	}
	if whole.String() != big {
		t.Fatalf("the pages read back are %d bytes and differ from the %d-byte result", whole.Len(), len(big))
	}
	if got, err := st.Get(ctxT(t), "store", "b1"); err != nil || got != big {
		t.Fatalf("stored: %d bytes, %v", len(got), err)
	}

	// Deleting the conversation's results leaves read_result a clear error.
	if err := st.DeleteConversation(ctxT(t), "store"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctxT(t), "store", "b1"); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("after delete: %v", err)
	}
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call(loop.ReadResultTool, `{"call_id":"b1"}`)), llmtest.Text("gone"))
	if done, err := h.eng.RunTurn(ctxT(t), "store", h.prof, "again"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	rs = h.results(t, "store")
	if last := rs[len(rs)-1]; !last.IsError || !strings.Contains(last.Content, "reading the result") {
		t.Fatalf("read_result after delete: %+v", last)
	}
}

func TestStoreLimitAndResume(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	st := withStore(t, h, func(d *loop.Deps) { d.StoreLimit = 50 << 10 })
	// A crashed instance stored a result and appended its entry; the
	// resumed turn's model reads it from the store.
	const conv, turn = "resumed", "t1"
	big := numbered(80 << 10)
	if err := st.Put(ctxT(t), conv, "r1", big[:50<<10]); err != nil {
		t.Fatal(err)
	}
	appendRaw(t, h.log, conv, turn, model.EntryUserMessage, loop.UserMessage{Text: "big"})
	appendRaw(t, h.log, conv, turn, model.EntryModelStep, loop.ModelStep{Step: 1, ToolCalls: []loop.StepCall{{ID: "r1", Name: "fake__big", Arguments: `{}`}}})
	appendRaw(t, h.log, conv, turn, model.EntryToolResult, loop.ToolResult{CallID: "r1", Tool: "fake__big", Server: "fake",
		State: model.ToolCallCompleted, Content: "head … tail", Cut: true, Stored: true, Size: len(big)})
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call(loop.ReadResultTool, fmt.Sprintf(`{"call_id":"r1","offset":%d}`, 50<<10-100))), llmtest.Text("ok"))
	done, err := h.eng.Resume(ctxT(t), conv, h.prof)
	if err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	rs := h.results(t, conv)
	r := rs[len(rs)-1]
	if r.IsError || readPart(t, r.Content) != big[50<<10-100:50<<10] || !strings.Contains(r.Content, fmt.Sprintf("the result was %d bytes; only the first %d were kept", len(big), 50<<10)) {
		t.Fatalf("read_result %q", clipped(r.Content))
	}
}

// failingStore refuses every put, as a full or unreachable store does.
type failingStore struct{}

func (failingStore) Put(context.Context, string, string, string) error {
	return apierr.New(apierr.ServiceUnavailable, "store down")
}

func (failingStore) Get(context.Context, string, string) (string, error) {
	return "", errors.New("never called: nothing was stored")
}

func TestStoreFailureKeepsResultInEntry(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, func(d *loop.Deps) { d.Results, d.ResultBudget = failingStore{}, 1000 })
	big := numbered(5000)
	h.fake.handlers["fake__big"] = func(context.Context, json.RawMessage) (json.RawMessage, error) { return textResult(big), nil }
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.ToolCall{ID: "f1", Name: "fake__big", Arguments: `{}`}),
		llmtest.ToolCalls(llmtest.Call(loop.ReadResultTool, `{"call_id":"f1","offset":4200}`)), llmtest.Text("ok"))
	if done, err := h.eng.RunTurn(ctxT(t), "fallback", h.prof, "go"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	rs := h.results(t, "fallback")
	if !rs[0].Cut || rs[0].Stored || rs[0].Full != big {
		t.Fatalf("cut result: stored=%v full=%d", rs[0].Stored, len(rs[0].Full))
	}
	if rs[1].IsError || readPart(t, rs[1].Content) != big[4200:] {
		t.Fatalf("read_result %q", clipped(rs[1].Content))
	}
}

// A model in one conversation cannot read another conversation's stored
// result through read_result, even knowing its call id: the id is looked up
// in its own conversation only.
func TestReadResultOnlyOwnConversation(t *testing.T) {
	h := setup(t, model.ChatProviderOpenAI, nil)
	withStore(t, h, nil)
	secret := numbered(40 << 10)
	h.fake.handlers["fake__big"] = func(context.Context, json.RawMessage) (json.RawMessage, error) { return textResult(secret), nil }
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.ToolCall{ID: "a1", Name: "fake__big", Arguments: `{}`}), llmtest.Text("stored"))
	if done, err := h.eng.RunTurn(ctxT(t), "alice", h.prof, "go"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	if rs := h.results(t, "alice"); len(rs) != 1 || !rs[0].Stored {
		t.Fatalf("alice's result was not stored: %+v", rs)
	}
	h.srv.Enqueue(llmtest.ToolCalls(llmtest.Call(loop.ReadResultTool, `{"call_id":"a1"}`)), llmtest.Text("tried"))
	if done, err := h.eng.RunTurn(ctxT(t), "mallory", h.prof, "read a1"); err != nil || done.Reason != model.TurnFinal {
		t.Fatalf("%+v %v", done, err)
	}
	rs := h.results(t, "mallory")
	if len(rs) != 1 || !rs[0].IsError || !strings.Contains(rs[0].Content, "no tool result") || strings.Contains(rs[0].Content, "line 0") {
		t.Fatalf("mallory's read_result of alice's call: %+v", rs)
	}
}
