package mcpserver

import (
	"bytes"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
)

// The progress of a session's task (2025-11-25). That version's Tasks say
// task-augmented requests support progress notifications and "the
// progressToken provided in the initial request remains valid throughout
// the task lifetime", and that a task's notifications carry the
// related-task _meta. So a task-augmented tools/call whose _meta has a
// progressToken gets notifications/progress for it, made from the task's
// recorded progress (its events, at most one per model.TaskProgressEvery),
// on the session's GET stream while one is open: progress is not queued for
// a later stream (only the newest matters, and tasks/get's statusMessage
// carries it). It only increases, as the progress utility requires: a
// re-run after a runner died starts again, and is not sent until it passes
// what was. None follows the task's end. Clients of 2026-07-28 get none:
// SEP-2663 says progress is not supported on tasks; their tasks/get carries
// it as statusMessage.

// callProgressToken is the progressToken of a request's _meta when it is a
// JSON string or integer, as the spec allows; nil otherwise.
func callProgressToken(params json.RawMessage) json.RawMessage {
	var p struct {
		Meta struct {
			Token json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil {
		return nil
	}
	tok := bytes.TrimSpace(p.Meta.Token)
	var s string
	var n int64
	switch {
	case len(tok) == 0:
		return nil
	case tok[0] == '"' && json.Unmarshal(tok, &s) == nil:
		return tok
	case tok[0] != '"' && tok[0] != 'n' && json.Unmarshal(tok, &n) == nil:
		return tok
	}
	return nil
}

// progressed sends t's progress to the session that made t, when it asked
// for progress and t's is further than what it was sent.
func (p *taskPushes) progressed(t model.Task) {
	p.mu.Lock()
	w := p.byID[t.ID]
	if w == nil || w.token == nil || (w.sent && t.Progress.Progress <= w.last) {
		p.mu.Unlock()
		return
	}
	w.sent, w.last = true, t.Progress.Progress
	ls, token := w.ls, w.token
	p.mu.Unlock()
	if ls.closed() {
		return
	}
	data, err := progressNotification(token, t.ID, *t.Progress)
	if err != nil {
		return
	}
	ls.push.sendLive(t.ID, data)
}

// progressNotification is the notifications/progress of task id's progress.
func progressNotification(token json.RawMessage, id string, tp model.TaskProgress) ([]byte, error) {
	params, err := json.Marshal(&mcp.ProgressNotificationParams{
		Meta:          mcp.Meta{relatedTaskMeta: map[string]string{"taskId": id}},
		ProgressToken: token, Progress: tp.Progress, Total: tp.Total, Message: tp.Message,
	})
	if err != nil {
		return nil, err
	}
	return jsonrpc.EncodeMessage(&jsonrpc.Request{Method: "notifications/progress", Params: params})
}
