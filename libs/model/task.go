package model

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// Task states (the names of the MCP Tasks extension). working is the only
// state that changes; the others are final.
const (
	TaskWorking   = "working"
	TaskCompleted = "completed"
	TaskFailed    = "failed"
	TaskCancelled = "cancelled"
)

// TaskFinal reports whether state is a final one.
func TaskFinal(state string) bool { return state != "" && state != TaskWorking }

// Task is a durable tool call (KV mcp_tasks, key = id): made by task.create,
// run by the owner of its server, kept for the retention after its last
// change. Result and Error are only in task.result replies and events.
type Task struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// Message says why a task failed or was cancelled (one line).
	Message string `json:"message,omitempty"`
	Server  string `json:"server"`
	Tool    string `json:"tool"`
	// Name is the namespaced name (<server>__<tool>).
	Name string `json:"name"`
	// Principal is whose task it is (libs/principal id); others get NOT_FOUND.
	Principal string `json:"principal"`
	// Idempotent is the tool's idempotentHint when the task was made: only
	// such a task is run again when its runner died mid-call.
	Idempotent bool `json:"idempotent,omitempty"`
	// Attempts counts the runs started; Runner is the last one's runner.
	Attempts  int       `json:"attempts"`
	Runner    string    `json:"runner,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// TTLMs is the retention: the record is gone this long after its last change.
	TTLMs int64 `json:"ttl_ms"`
	// Progress is the last progress the server reported for the task's call
	// (notifications/progress), recorded at most every TaskProgressEvery
	// while it works; a final task keeps the last one its run noted.
	Progress *TaskProgress `json:"progress,omitempty"`
	// Result is the CallToolResult of a completed task (isError included).
	Result json.RawMessage `json:"result,omitempty"`
	// Error is why a failed or cancelled task has no result.
	Error *apierr.Error `json:"error,omitempty"`
}

// TaskProgressEvery bounds how often a task's progress is recorded (one
// write of the record and one event): the newest notification of each
// interval is written at its end, none is written after the task ended.
const TaskProgressEvery = 500 * time.Millisecond

// TaskProgress is a progress notification of a task's call, as recorded.
type TaskProgress struct {
	Progress float64 `json:"progress"`
	Total    float64 `json:"total,omitempty"`
	Message  string  `json:"message,omitempty"`
}

// String is the progress for people: "step 3 (3/10)", "3/10", "40".
func (p TaskProgress) String() string {
	n := strconv.FormatFloat(p.Progress, 'f', -1, 64)
	if p.Total > 0 {
		n += "/" + strconv.FormatFloat(p.Total, 'f', -1, 64)
	}
	if p.Message == "" {
		return n
	}
	return p.Message + " (" + n + ")"
}

// Summary is the task without its result (what get, list and create answer).
func (t Task) Summary() Task {
	t.Result = nil
	return t
}

// TaskCreateRequest is the body of task.create: a tool call, named by server
// and tool (original name) or by the namespaced name.
type TaskCreateRequest struct {
	Server    string          `json:"server,omitempty"`
	Tool      string          `json:"tool,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// TaskRequest is the body of task.get, task.cancel and task.result; WaitMs
// (result only) waits up to that long for a final state (capped at
// TaskMaxWait and the caller's Mcp-Timeout-Ms).
type TaskRequest struct {
	ID     string `json:"id"`
	WaitMs int64  `json:"wait_ms,omitempty"`
}

// TaskMaxWait bounds one task.result wait.
const TaskMaxWait = 60 * time.Second

// TaskListRequest is the body of task.list: the caller's tasks, newest
// first; All (admins only) lists every principal's.
type TaskListRequest struct {
	State string `json:"state,omitempty"`
	All   bool   `json:"all,omitempty"`
}

// TaskListReply is the answer of task.list.
type TaskListReply struct {
	Tasks []Task `json:"tasks"`
}
