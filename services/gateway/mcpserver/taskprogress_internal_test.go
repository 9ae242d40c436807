package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
)

// The progressToken of a task-augmented call: a string or an integer.
func TestProgressToken(t *testing.T) {
	for params, want := range map[string]string{
		`{"name":"a__b","task":{},"_meta":{"progressToken":"p-1"}}`: `"p-1"`,
		`{"name":"a__b","task":{},"_meta":{"progressToken":7}}`:     `7`,
		`{"name":"a__b","task":{},"_meta":{"progressToken":1.5}}`:   ``,
		`{"name":"a__b","task":{},"_meta":{"progressToken":{}}}`:    ``,
		`{"name":"a__b","task":{},"_meta":{"progressToken":null}}`:  ``,
		`{"name":"a__b","task":{}}`:                                 ``,
	} {
		if got := string(callProgressToken(json.RawMessage(params))); got != want {
			t.Errorf("callProgressToken(%s) = %q, want %q", params, got, want)
		}
	}
}

// A session's task sends notifications/progress with the call's token and
// the related-task _meta, only while its stream is open, only increasing,
// and none after the task ended; a task made without a token sends none.
func TestTaskProgressPush(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ls := &liveSession{done: ctx}
	p := &taskPushes{byID: map[string]*taskWatch{
		"t1": {ls: ls, token: json.RawMessage(`"tok"`)},
		"t2": {ls: ls},
	}}
	at := func(id string, n float64) model.Task {
		return model.Task{ID: id, State: model.TaskWorking, Progress: &model.TaskProgress{Progress: n, Total: 10, Message: "step"}}
	}
	p.progressed(at("t1", 1)) // no stream open: dropped, not queued
	if len(ls.push.pending) != 0 {
		t.Fatalf("progress queued without a stream: %d", len(ls.push.pending))
	}
	rec := httptest.NewRecorder()
	w, detach := ls.push.attach(rec)
	defer detach()
	w.WriteHeader(http.StatusOK)
	p.progressed(at("t1", 2))
	p.progressed(at("t1", 2)) // not further: not sent again
	p.progressed(at("t1", 1)) // a re-run starting again: not sent
	p.progressed(at("t2", 5)) // no token: nothing
	delivered(t, &ls.push)    // (the status would supersede progress still waiting)
	p.ended(model.Task{ID: "t1", State: model.TaskCompleted})
	p.progressed(at("t1", 9)) // after the end: nothing
	delivered(t, &ls.push)

	var msgs []map[string]any
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				t.Fatalf("not JSON: %s", data)
			}
			msgs = append(msgs, m)
		}
	}
	if len(msgs) != 2 || msgs[0]["method"] != "notifications/progress" || msgs[1]["method"] != "notifications/tasks/status" {
		t.Fatalf("stream: %s", rec.Body.String())
	}
	params := msgs[0]["params"].(map[string]any)
	meta, _ := params["_meta"].(map[string]any)
	related, _ := meta[relatedTaskMeta].(map[string]any)
	if params["progressToken"] != "tok" || params["progress"] != 2.0 || params["total"] != 10.0 || params["message"] != "step" || related["taskId"] != "t1" {
		t.Fatalf("notifications/progress params: %v", params)
	}
}

// A working task's statusMessage is its progress in both eras; a failed
// one's is why, whatever progress it made.
func TestStatusMessage(t *testing.T) {
	working := model.Task{ID: "t", State: model.TaskWorking, Progress: &model.TaskProgress{Progress: 3, Total: 10, Message: "step 3"}}
	if v1, v2 := toV1(working), toV2(working, "complete"); v1.StatusMessage != "step 3 (3/10)" || v2.StatusMessage != "step 3 (3/10)" {
		t.Fatalf("working: %q / %q", v1.StatusMessage, v2.StatusMessage)
	}
	failed := working
	failed.State, failed.Message = model.TaskFailed, "server slow exited during the call"
	if v1, v2 := toV1(failed), toV2(failed, "complete"); v1.StatusMessage != failed.Message || v2.StatusMessage != failed.Message {
		t.Fatalf("failed: %q / %q", v1.StatusMessage, v2.StatusMessage)
	}
}
