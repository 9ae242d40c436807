package mcpserver

import (
	"encoding/json"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The wire shapes of a task on /mcp (go-sdk v1.8.0 has no Tasks types).
// Sessions of 2025-11-25 speak that version's experimental Tasks: a Task
// object (ttl, pollInterval), wrapped in "task" by CreateTaskResult and flat
// in the results of tasks/get and tasks/cancel. Clients of 2026-07-28 speak
// the Tasks extension (io.modelcontextprotocol/tasks, SEP-2663): the same
// fields named ttlMs and pollIntervalMs, flat in every result with its
// resultType, and a final task of tasks/get carrying its result or error.

// tasksExtension is the extension's identifier (capabilities, _meta).
const tasksExtension = "io.modelcontextprotocol/tasks"

// relatedTaskMeta is the _meta key of tasks/result naming the task (2025-11-25).
const relatedTaskMeta = "io.modelcontextprotocol/related-task"

// taskPollMs is the poll interval suggested to clients: a task's state
// lives in JetStream, so a poll is one bus request.
const taskPollMs = 1000

// taskV1 is a Task of protocol 2025-11-25.
type taskV1 struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           int64  `json:"ttl"`
	PollInterval  int64  `json:"pollInterval,omitempty"`
}

// statusMessage is a task's statusMessage in both eras: while it works, its
// recorded progress ("step 3 (3/10)"; SEP-2663 names progress descriptions
// of a working task as its use); once failed or cancelled, why.
func statusMessage(t model.Task) string {
	if t.State == model.TaskWorking && t.Progress != nil {
		return t.Progress.String()
	}
	return t.Message
}

func toV1(t model.Task) taskV1 {
	v := taskV1{TaskID: t.ID, Status: t.State, StatusMessage: statusMessage(t),
		CreatedAt: isoTime(t.CreatedAt), LastUpdatedAt: isoTime(t.UpdatedAt), TTL: t.TTLMs}
	if !model.TaskFinal(t.State) {
		v.PollInterval = taskPollMs
	}
	return v
}

// createdV1 is the CreateTaskResult of 2025-11-25.
type createdV1 struct {
	Task taskV1 `json:"task"`
}

// listV1 is the ListTasksResult of 2025-11-25 (one page: no cursor).
type listV1 struct {
	Tasks []taskV1 `json:"tasks"`
}

// taskV2 is a task of the Tasks extension: the CreateTaskResult
// (resultType "task") and the results of tasks/get (resultType "complete",
// a final task with its result or error).
type taskV2 struct {
	TaskID         string                     `json:"taskId"`
	Status         string                     `json:"status"`
	StatusMessage  string                     `json:"statusMessage,omitempty"`
	CreatedAt      string                     `json:"createdAt"`
	LastUpdatedAt  string                     `json:"lastUpdatedAt"`
	TTLMs          int64                      `json:"ttlMs"`
	PollIntervalMs int64                      `json:"pollIntervalMs,omitempty"`
	Result         json.RawMessage            `json:"result,omitempty"`
	Error          *jsonrpc.Error             `json:"error,omitempty"`
	ResultType     string                     `json:"resultType"`
	Meta           map[string]json.RawMessage `json:"_meta,omitempty"`
}

func toV2(t model.Task, resultType string) taskV2 {
	v := taskV2{TaskID: t.ID, Status: t.State, StatusMessage: statusMessage(t),
		CreatedAt: isoTime(t.CreatedAt), LastUpdatedAt: isoTime(t.UpdatedAt), TTLMs: t.TTLMs, ResultType: resultType}
	if !model.TaskFinal(t.State) {
		v.PollIntervalMs = taskPollMs
	}
	return v
}

// doneV2 is the result of tasks/cancel and tasks/update of the extension.
type doneV2 struct {
	ResultType string                     `json:"resultType"`
	Meta       map[string]json.RawMessage `json:"_meta,omitempty"`
}

// isoTime is an ISO 8601 timestamp of the spec's Task.
func isoTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// taskError is the JSON-RPC error of a failed (or cancelled) task: the
// error contract's body as data, -32602 for what was wrong with the call
// itself, -32603 otherwise.
func taskError(t model.Task) *jsonrpc.Error {
	ae := t.Error
	if ae == nil {
		msg := t.Message
		if msg == "" {
			msg = "task " + t.ID + " ended " + t.State
		}
		ae = apierr.New(apierr.Internal, msg)
	}
	code := int64(jsonrpc.CodeInternalError)
	if ae.Code == apierr.NotFound || ae.Code == apierr.Validation {
		code = jsonrpc.CodeInvalidParams
	}
	return rpcError(code, ae)
}
