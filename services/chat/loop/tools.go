package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/deadline"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/guard"
	"github.com/mcpbus/mcpbus/services/chat/provider"
)

// ClientTools is the ToolCaller of a libs/client agent: the whole catalog,
// calls over the bus.
type ClientTools struct {
	C *client.Client
}

// List returns the catalog of every running server.
func (c ClientTools) List(ctx context.Context) ([]model.Tool, error) { return c.C.ListTools(ctx, "") }

// Call calls tool of server.
func (c ClientTools) Call(ctx context.Context, server, tool string, args json.RawMessage) (json.RawMessage, error) {
	return c.C.Call(ctx, server, tool, args, &client.CallOptions{OnClientRequest: ServerRequests(ctx)})
}

var readResultSpec = provider.ToolSpec{
	Name: ReadResultTool,
	Description: "Reads a byte range of a tool result that was cut because it was too large. " +
		"call_id names the cut result; offset (default 0) and length (default and maximum: the result budget) choose the range.",
	InputSchema: []byte(`{"type":"object","properties":{"call_id":{"type":"string"},"offset":{"type":"integer","minimum":0},"length":{"type":"integer","minimum":1}},"required":["call_id"]}`),
}

// runCalls runs the pending calls of the last step concurrently and appends
// one tool_result per call as each ends. A call ended by the cancellation of
// ctx gets no result; the first failure of the log stops the others.
func (t *turn) runCalls(parent context.Context, s *state) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	tools := resolver{offered: t.offered, live: sync.OnceValue(func() map[string]model.Tool {
		_, byName := t.catalog(ctx)
		return byName
	})}
	t.offered = nil
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for _, c := range s.pending {
		wg.Go(func() {
			r, ok, err := t.runCall(ctx, s, tools, c)
			if err == nil && ok {
				err = t.append(ctx, model.EntryToolResult, r)
			}
			if err != nil {
				errOnce.Do(func() { firstErr = err; cancel(errLogFailed) })
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return parent.Err()
}

// resolver finds the tools of a step's calls: in the catalog the step was
// offered (what the model chose from, listed just before), else in the live
// catalog, listed once for all the calls, when the turn has no such catalog
// (resumed) or it lacks the name.
type resolver struct {
	offered map[string]model.Tool
	live    func() map[string]model.Tool
}

// catalog is the catalog the step was offered, else the live one; a
// search looks in it (the live one is indexed as it is listed).
func (r resolver) catalog() map[string]model.Tool {
	if r.offered != nil {
		return r.offered
	}
	return r.live()
}

// lookup returns the tool named name and the catalog it looked in.
func (r resolver) lookup(name string) (model.Tool, map[string]model.Tool, bool) {
	if tl, ok := r.offered[name]; ok {
		return tl, r.offered, true
	}
	byName := r.live()
	tl, ok := byName[name]
	return tl, byName, ok
}

// runCall runs one call; ok is false when ctx ended it (no result to
// write); err is a failure of the log (an approval's append).
func (t *turn) runCall(ctx context.Context, s *state, tools resolver, c StepCall) (r ToolResult, ok bool, err error) {
	ctx, op := t.startTool(ctx, c)
	et := "" // error.type when the loop refuses the call or it times out
	defer func() { t.endTool(ctx, op, r, ok, err, et) }()
	r = ToolResult{CallID: c.ID, Tool: c.Name}
	fail := func(kind, msg string) (ToolResult, bool, error) {
		et = kind
		r.State, r.IsError, r.Content = model.ToolCallFailed, true, msg
		t.publishCall(c, r, 0)
		return r, true, nil
	}
	args := json.RawMessage(strings.TrimSpace(c.Arguments))
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	if !json.Valid(args) || !bytes.HasPrefix(args, []byte("{")) {
		return fail(errInvalidArguments, fmt.Sprintf("Invalid arguments for %s: they must be a JSON object; got %s. Call the tool again with valid JSON arguments.", c.Name, clip(string(args), 200)))
	}
	if c.Name == ReadResultTool {
		r.State, r.Content = model.ToolCallCompleted, t.readResult(ctx, s, args)
		r.IsError = strings.HasPrefix(r.Content, "read_result: ")
		if r.IsError {
			r.State = model.ToolCallFailed
		}
		t.publishCall(c, r, 0)
		return r, true, nil
	}
	if c.Name == SearchToolsTool {
		r.Content, r.Found, r.IsError = t.searchTools(args, tools.catalog())
		r.State = model.ToolCallCompleted
		if r.IsError {
			et, r.State = errInvalidArguments, model.ToolCallFailed
		}
		t.publishCall(c, r, 0)
		return r, true, nil
	}
	if tt, ok := s.tasks[c.ID]; ok {
		// Resumed: the call runs as a task already; wait for it, never
		// call again (it was approved before it was started).
		tr, ok := t.e.d.Tools.(TaskRunner)
		if !ok {
			return fail(errUnknownTool, fmt.Sprintf("The call of %s runs as task %s, which this chat instance cannot read.", c.Name, tt.TaskID))
		}
		r.Server = tt.Server
		start := time.Now()
		raw, timedOut, err := t.awaitTask(ctx, tr, tt.TaskID)
		return t.outcome(ctx, c, r, raw, timedOut, t.e.d.TaskTimeout, err, time.Since(start), &et)
	}
	tool, byName, known := tools.lookup(c.Name)
	if !known && len(byName) > t.budget() {
		return fail(errUnknownTool, fmt.Sprintf("Unknown tool %q. Call %s to find the tools available.", c.Name, SearchToolsTool))
	}
	if !known {
		names := make([]string, 0, len(byName))
		for n := range byName {
			names = append(names, n)
		}
		return fail(errUnknownTool, fmt.Sprintf("Unknown tool %q. The tools available are: %s.", c.Name, clip(strings.Join(names, ", "), 2000)))
	}
	if s.breaker.Open(tool.Server) {
		return fail(errBreakerOpen, fmt.Sprintf("Not called: server %s is failing (%d consecutive errors in this turn). Do not call its tools again in this turn; use another way or tell the user.", tool.Server, t.e.d.BreakerLimit))
	}
	switch t.profile.Approval.Decide(model.ToolNames(c.Name, tool.Server, tool.Tool)...) {
	case model.ApprovalDeny:
		return fail(errDenied, fmt.Sprintf("The call of %s was denied by policy (the profile's approval rules); it was not run.", c.Name))
	case model.ApprovalAsk:
		decision, ok := s.approvals[c.ID]
		if !ok {
			if t.e.d.Approver == nil {
				return fail(errDenied, fmt.Sprintf("The call of %s needs approval, but no approver is available, so it was denied and not run.", c.Name))
			}
			waiting := model.ChatToolCall{CallID: c.ID, Tool: c.Name, State: model.ToolCallAwaitingApproval, Arguments: args}
			actx := ctx
			if t.taskRunner(c.Name) == nil {
				// The call is made below, before this function returns: an
				// approval left for the runner is consumed then if the
				// runner has not (its rules not yet asking). A task's call
				// runs later, so its approval stays for the runner.
				var callDone context.CancelFunc
				actx, callDone = context.WithCancel(ctx)
				defer callDone()
				actx = approvals.Sweeping(actx)
			}
			d, err := t.e.d.Approver.Ask(actx, t.conv, waiting, tool, func() {
				t.publish(model.ChatEvent{Kind: model.ChatEventToolCall, ToolCall: &waiting})
			})
			if ctx.Err() != nil {
				return r, false, nil
			}
			if err != nil {
				t.e.d.Logger.Warn("chat: asking for approval failed; the call is denied", "conversation", t.conv, "call", c.ID, "err", err)
				d = model.DecisionDeny
			}
			if err := t.append(ctx, model.EntryApproval, Approval{CallID: c.ID, Tool: c.Name, Decision: d}); err != nil {
				return r, false, err
			}
			decision = d
		}
		if decision != model.DecisionApprove && decision != model.DecisionApproveConversation {
			return fail(errDenied, fmt.Sprintf("The call of %s was denied by the user; it was not run.", c.Name))
		}
	}

	r.Server = tool.Server
	t.publish(model.ChatEvent{Kind: model.ChatEventToolCall, ToolCall: &model.ChatToolCall{CallID: c.ID, Tool: c.Name, State: model.ToolCallStarted, Arguments: args}})
	start := time.Now()
	if tr := t.taskRunner(c.Name); tr != nil {
		tt, err := t.startTask(ctx, tr, c, tool, args)
		if isLogError(err) {
			return r, false, err
		}
		var raw json.RawMessage
		timedOut := false
		if err == nil {
			raw, timedOut, err = t.awaitTask(ctx, tr, tt.TaskID)
		}
		return t.outcome(ctx, c, r, raw, timedOut, t.e.d.TaskTimeout, err, time.Since(start), &et)
	}
	// The user's time on a server's form does not count (libs/client pauses it).
	cctx, cancel := deadline.WithTimeout(withServerRequests(ctx, func(ctx context.Context, req model.ClientRequest) (any, error) {
		return t.answerServer(ctx, c, req)
	}), t.e.d.CallTimeout)
	raw, err := t.e.d.Tools.Call(cctx, tool.Server, tool.Tool, args)
	timedOut := err != nil && (errors.Is(err, context.DeadlineExceeded) || cctx.Err() != nil || atDeadline(cctx, err))
	cancel()
	return t.outcome(ctx, c, r, raw, timedOut, t.e.d.CallTimeout, err, time.Since(start), &et)
}

// outcome makes the tool_result of a call that reached the server (or its
// task): ok is false when ctx ended it; et gets error.type of a failure.
func (t *turn) outcome(ctx context.Context, c StepCall, r ToolResult, raw json.RawMessage, timedOut bool, limit time.Duration, err error, took time.Duration, et *string) (ToolResult, bool, error) {
	r.DurationMS = float64(took.Microseconds()) / 1000
	switch {
	case ctx.Err() != nil:
		return r, false, nil
	case timedOut:
		*et = errTimeout
		r.State, r.IsError, r.CallFailed = model.ToolCallTimedOut, true, true
		r.Content = fmt.Sprintf("Tool call timed out after %s.", limit)
	case err != nil:
		*et = errType(err)
		r.State, r.IsError, r.CallFailed = model.ToolCallFailed, true, true
		r.Content = fmt.Sprintf("The call of %s failed: %s", c.Name, apierr.From(err).Message)
	default:
		text, isErr := resultText(raw)
		r.State, r.IsError = model.ToolCallCompleted, isErr
		if isErr {
			r.State = model.ToolCallFailed
		}
		ref := fmt.Sprintf(`kept: call %s with {"call_id": %q, "offset": N} to read it`, ReadResultTool, c.ID)
		if cut, ok := guard.Cut(text, t.e.d.ResultBudget, ref); ok {
			r.Content, r.Cut, r.Size = cut, true, len(text)
			t.keep(ctx, &r, text)
		} else {
			r.Content = text
		}
	}
	t.publishCall(c, r, took)
	return r, true, nil
}

func (t *turn) publishCall(c StepCall, r ToolResult, took time.Duration) {
	tc := &model.ChatToolCall{CallID: c.ID, Tool: c.Name, State: r.State, Summary: summary(r.Content),
		DurationMS: float64(took.Microseconds()) / 1000}
	// Only an object: the event's schema says so, and a call with anything
	// else never reached the tool.
	if a := bytes.TrimSpace([]byte(c.Arguments)); len(a) > 0 && a[0] == '{' && json.Valid(a) {
		tc.Arguments = json.RawMessage(a)
	}
	t.publish(model.ChatEvent{Kind: model.ChatEventToolCall, ToolCall: tc})
}

// keep keeps the whole text of a cut result for read_result: in the result
// store when there is one, else (or when storing fails) in the entry, up to
// the smaller KeepLimit. The store's copy is written before the entry that
// refers to it is appended, so a resumed turn always finds it.
func (t *turn) keep(ctx context.Context, r *ToolResult, text string) {
	if rs := t.e.d.Results; rs != nil {
		err := rs.Put(ctx, t.conv, r.CallID, truncate(text, t.e.d.StoreLimit))
		if err == nil {
			r.Stored = true
			return
		}
		t.e.d.Logger.Warn("chat: storing a cut result failed; the log entry keeps a shorter copy",
			"conversation", t.conv, "call", r.CallID, "err", err)
	}
	r.Full = truncate(text, t.e.d.KeepLimit)
}

// fullText is the kept whole text of a cut result, or the message for the
// model when it cannot be read.
func (t *turn) fullText(ctx context.Context, r ToolResult) (string, string) {
	switch {
	case r.Stored && t.e.d.Results == nil:
		return "", fmt.Sprintf("read_result: the result of %q is in a result store this service does not have", r.CallID)
	case r.Stored:
		text, err := t.e.d.Results.Get(ctx, t.conv, r.CallID)
		if err != nil {
			return "", fmt.Sprintf("read_result: reading the result of %q failed: %s", r.CallID, apierr.From(err).Message)
		}
		return text, ""
	case r.Cut:
		return r.Full, ""
	}
	return r.Content, ""
}

// readResult serves the built-in read_result tool from the kept results.
func (t *turn) readResult(ctx context.Context, s *state, args json.RawMessage) string {
	var a struct {
		CallID string `json:"call_id"`
		Offset int    `json:"offset"`
		Length int    `json:"length"`
	}
	if err := json.Unmarshal(args, &a); err != nil || a.CallID == "" {
		return "read_result: arguments must be {\"call_id\": string, \"offset\": integer, \"length\": integer}"
	}
	r, ok := s.results[a.CallID]
	if !ok {
		return fmt.Sprintf("read_result: no tool result with call_id %q in this conversation", a.CallID)
	}
	text, msg := t.fullText(ctx, r)
	if msg != "" {
		return msg
	}
	if a.Offset < 0 || a.Offset > len(text) {
		return fmt.Sprintf("read_result: offset %d is outside the result (%d bytes)", a.Offset, len(text))
	}
	budget := t.e.d.ResultBudget - 100
	if a.Length <= 0 || a.Length > budget {
		a.Length = budget
	}
	end := min(len(text), a.Offset+a.Length)
	part := strings.ToValidUTF8(text[a.Offset:end], "")
	more := ""
	if end < len(text) {
		more = fmt.Sprintf(" (more from offset %d)", end)
	}
	if r.Size > len(text) {
		more += fmt.Sprintf(" (the result was %d bytes; only the first %d were kept)", r.Size, len(text))
	}
	return fmt.Sprintf("[bytes %d-%d of %d%s]\n%s", a.Offset, end, len(text), more, part)
}

// resultText is the text of a CallToolResult for the model.
func resultText(raw json.RawMessage) (string, bool) {
	var res struct {
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent"`
		IsError           bool              `json:"isError"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return string(raw), false
	}
	var parts []string
	for _, c := range res.Content {
		var b struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			MimeType string `json:"mimeType"`
		}
		_ = json.Unmarshal(c, &b)
		switch b.Type {
		case "text":
			parts = append(parts, b.Text)
		case "image", "audio":
			parts = append(parts, fmt.Sprintf("[%s content, %s, not shown]", b.Type, b.MimeType))
		default:
			parts = append(parts, string(c))
		}
	}
	if len(parts) == 0 && len(res.StructuredContent) > 0 {
		parts = append(parts, string(res.StructuredContent))
	}
	return strings.Join(parts, "\n"), res.IsError
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return truncate(s, n) + "…"
}

// truncate cuts s to at most n bytes without splitting a character.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// deadlineSlack is how close to its deadline a call's NETWORK_ERROR counts as
// its timeout: the runner is given the same deadline and answers "timed out"
// itself, often just before this process's own timer fires.
const deadlineSlack = 100 * time.Millisecond

// atDeadline reports whether err is the runner's answer to the call's own
// deadline rather than another network failure.
func atDeadline(ctx context.Context, err error) bool {
	left, ok := deadline.Left(ctx)
	return ok && apierr.Of(err) == apierr.Network && left <= deadlineSlack
}
