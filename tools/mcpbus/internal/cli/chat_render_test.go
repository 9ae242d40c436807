package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// turnEvents is a turn that narrates, calls two tools (one fails), and answers.
func turnEvents() []model.ChatEvent {
	cost := 0.002
	tc := func(id, state string, ms float64, summary string) model.ChatEvent {
		return model.ChatEvent{Kind: model.ChatEventToolCall, Turn: "t1", ToolCall: &model.ChatToolCall{
			CallID: id, Tool: "fs__read", State: state, DurationMS: ms, Summary: summary, Arguments: json.RawMessage(`{"path":"/x"}`)}}
	}
	return []model.ChatEvent{
		{Kind: model.ChatEventTextDelta, Turn: "t1", Text: "Let me "},
		{Kind: model.ChatEventTextDelta, Turn: "t1", Text: "look."},
		tc("c1", model.ToolCallStarted, 0, ""),
		tc("c2", model.ToolCallStarted, 0, ""),
		tc("c1", model.ToolCallCompleted, 123.4, "ok"),
		tc("c2", model.ToolCallFailed, 7, "no such file"),
		{Kind: model.ChatEventUsage, Turn: "t1", Usage: &model.ChatUsage{Step: 1, InputTokens: 10, OutputTokens: 5, Cost: &cost, Currency: "USD"}},
		{Kind: model.ChatEventTextDelta, Turn: "t1", Text: "The file "},
		{Kind: model.ChatEventTextDelta, Turn: "t1", Text: "says hi."},
		{Kind: model.ChatEventUsage, Turn: "t1", Usage: &model.ChatUsage{Step: 2, InputTokens: 20, OutputTokens: 3, Cost: &cost, Currency: "USD"}},
		{Kind: model.ChatEventDone, Turn: "t1", Done: &model.ChatDone{Reason: model.TurnFinal, Steps: 2}},
	}
}

func render(r *renderer, evs []model.ChatEvent) (stdout, stderr string) {
	var out, errw bytes.Buffer
	r.out, r.errw = &out, &errw
	r.beginTurn()
	for _, ev := range evs {
		r.event(ev)
	}
	return out.String(), errw.String()
}

// One-shot: only the answer on stdout; narration and tool lines on stderr.
func TestRenderOneShot(t *testing.T) {
	r := &renderer{}
	out, errw := render(r, turnEvents())
	if out != "The file says hi.\n" {
		t.Errorf("stdout %q, want only the answer", out)
	}
	for _, want := range []string{"Let me look.\n", "✓ fs__read (123 ms)\n", "✗ fs__read (7.0 ms): no such file\n"} {
		if !strings.Contains(errw, want) {
			t.Errorf("stderr %q lacks %q", errw, want)
		}
	}
	if strings.Contains(errw, "\033[") {
		t.Errorf("escape sequences on a stderr that is not a terminal: %q", errw)
	}
	if got := r.summary(); got != "2 steps · 30 in / 8 out tokens · 0.0040 USD" {
		t.Errorf("summary %q", got)
	}
}

// Interactive: text streams to stdout as it comes, the spinner is cleared
// before each result line.
func TestRenderStreamSpinner(t *testing.T) {
	r := &renderer{stream: true, spin: true}
	out, errw := render(r, turnEvents())
	if out != "Let me look.\nThe file says hi.\n" {
		t.Errorf("stdout %q", out)
	}
	if !strings.Contains(errw, "fs__read, fs__read …") {
		t.Errorf("no spinner line for the two running calls: %q", errw)
	}
	if !strings.Contains(errw, "\r\033[K✓ fs__read (123 ms)\n") {
		t.Errorf("the spinner was not cleared before the result line: %q", errw)
	}
	if strings.HasSuffix(errw, "…") {
		t.Errorf("the spinner is left on screen after the turn: %q", errw)
	}
}

// --json: every event, one JSON object a line, nothing else on stdout.
func TestRenderJSON(t *testing.T) {
	evs := turnEvents()
	out, errw := render(&renderer{json: true}, evs)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(evs) || errw != "" {
		t.Fatalf("%d lines for %d events (stderr %q):\n%s", len(lines), len(evs), errw, out)
	}
	var last model.ChatEvent
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Kind != model.ChatEventDone || last.Done.Reason != model.TurnFinal {
		t.Errorf("last line %q (%v)", lines[len(lines)-1], err)
	}
}

// A turn that ends badly says why; its error event is kept for the exit status.
func TestRenderErrorEnd(t *testing.T) {
	r := &renderer{}
	out, errw := render(r, []model.ChatEvent{
		{Kind: model.ChatEventTextDelta, Turn: "t1", Text: "partial"},
		{Kind: model.ChatEventError, Turn: "t1", Error: apierr.New(apierr.RateLimited, "slow down")},
		{Kind: model.ChatEventDone, Turn: "t1", Done: &model.ChatDone{Reason: model.TurnError, Message: "model failed"}},
	})
	if out != "" {
		t.Errorf("stdout %q: the narration before an error is not an answer", out)
	}
	for _, want := range []string{"error: RATE_LIMITED: slow down", "turn ended: error: model failed"} {
		if !strings.Contains(errw, want) {
			t.Errorf("stderr %q lacks %q", errw, want)
		}
	}
	if r.lastErr == nil || r.lastErr.Code != apierr.RateLimited {
		t.Errorf("lastErr %v", r.lastErr)
	}
}

// The chat service sends the error that ends a turn twice, as an error
// event and as the done message: the user reads it once.
func TestRenderErrorEndOnce(t *testing.T) {
	r := &renderer{}
	_, errw := render(r, []model.ChatEvent{
		{Kind: model.ChatEventError, Turn: "t1", Error: apierr.New(apierr.Unauthorized, "the provider refused the API key")},
		{Kind: model.ChatEventDone, Turn: "t1", Done: &model.ChatDone{Reason: model.TurnError, Message: "the provider refused the API key"}},
	})
	if n := strings.Count(errw, "the provider refused the API key"); n != 1 {
		t.Errorf("the error is printed %d times:\n%s", n, errw)
	}
	if !strings.Contains(errw, "error: UNAUTHORIZED: the provider refused the API key") {
		t.Errorf("stderr %q lacks the error with its code", errw)
	}
}

// What the model writes (its text, the name of a tool it made up) and a
// provider's error reach the terminal without escape sequences: a prompt
// injection could otherwise conceal the approval prompt that follows
// (SGR 8) and print a fake one, or set the clipboard (OSC 52).
func TestRenderModelTextWithoutEscapes(t *testing.T) {
	evs := []model.ChatEvent{
		{Kind: model.ChatEventTextDelta, Turn: "t1", Text: "Fine.\tok\r\n\x1b[8m"},
		{Kind: model.ChatEventTextDelta, Turn: "t1", Text: "\x1b]52;c;ZXZpbA==\x07\u009b2K"},
		{Kind: model.ChatEventToolCall, Turn: "t1", ToolCall: &model.ChatToolCall{CallID: "c1", Tool: "x\x1b[2K", State: model.ToolCallFailed, Summary: "Unknown tool"}},
		{Kind: model.ChatEventError, Turn: "t1", Error: apierr.New(apierr.Internal, "provider says \x1b[8m")},
		{Kind: model.ChatEventDone, Turn: "t1", Done: &model.ChatDone{Reason: model.TurnError, Message: "provider says \x1b[8m"}},
	}
	for _, stream := range []bool{true, false} {
		out, errw := render(&renderer{stream: stream}, evs)
		if strings.ContainsAny(out+errw, "\x1b\x07\r\u009b") {
			t.Errorf("stream %v: control characters reach the terminal: %q / %q", stream, out, errw)
		}
		if !strings.Contains(out+errw, "Fine.\tok\n") {
			t.Errorf("stream %v: the text lost its tab or line break: %q / %q", stream, out, errw)
		}
	}
}

// chat history shows the log's model text and tool names without escape
// sequences too.
func TestHistoryWithoutEscapes(t *testing.T) {
	step, _ := json.Marshal(map[string]any{"step": 1, "text": "hi\x1b[8m", "tool_calls": []any{map[string]any{"id": "c1", "name": "x\x1b[2K", "arguments": "{}"}}})
	end, _ := json.Marshal(model.ChatDone{Reason: model.TurnError, Message: "bad\x1b]52;c;eA==\x07"})
	var out bytes.Buffer
	printEntries(&globals{stdout: &out}, []model.ChatEntry{
		{Kind: model.EntryModelStep, Turn: "t1", Payload: step},
		{Kind: model.EntryTurnEnd, Turn: "t1", Payload: end},
	})
	if strings.ContainsAny(out.String(), "\x1b\x07") || !strings.Contains(out.String(), "hi") {
		t.Fatalf("history %q", out.String())
	}
}
