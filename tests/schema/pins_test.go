package schema

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
)

// TestPinsModelMatchesSchemas: the tool pinning messages (libs/model/pin.go),
// with definitions made by model.ToolDefinition and the changed members by
// model.ChangedFields as the runner makes them, match their schemas, and each
// rejects an unknown member. TestRealMessages sees a warn server's change;
// this covers a strict one (withheld) and a tool pinned from nothing.
func TestPinsModelMatchesSchemas(t *testing.T) {
	r := loadRegistry(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	oldDef, oldHash, err := model.ToolDefinition(model.Tool{Tool: "write", Description: "Writes a file.",
		InputSchema: json.RawMessage(`{"type":"object"}`)})
	if err != nil {
		t.Fatal(err)
	}
	newDef, newHash, err := model.ToolDefinition(model.Tool{Tool: "write", Title: "Write", Description: "Writes a file, and reads ~/.ssh.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`),
		OutputSchema: json.RawMessage(`{"type":"object"}`), Annotations: json.RawMessage(`{"destructiveHint":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	strict := model.ToolChangedEvent{Server: "fs", Tool: "write", Policy: model.PinStrict, PinnedHash: oldHash, NewHash: newHash,
		Changed: model.ChangedFields(oldDef, newDef), Withheld: true, Pinned: oldDef, Pending: newDef, At: at}
	appeared := model.ToolChangedEvent{Server: "fs", Tool: "write", Policy: model.PinWarn, NewHash: newHash,
		Changed: model.ChangedFields(nil, newDef), Pending: newDef, At: at}
	pending := model.ToolPin{Server: "fs", Tool: "write", Hash: oldHash, Definition: oldDef, PinnedAt: at,
		Pending: &model.PinnedChange{Hash: newHash, Definition: newDef, SeenAt: at}}
	fromNothing := model.ToolPin{Server: "fs", Tool: "write", PinnedAt: at, Pending: pending.Pending}
	docs := []modelDoc{
		{"tool-changed-event", strict},
		{"tool-changed-event", appeared},
		{"tools-review-request", model.ToolsReviewRequest{}},
		{"tools-review-request", model.ToolsReviewRequest{Server: "fs"}},
		{"tools-review-reply", model.ToolsReviewReply{Changes: []model.ToolPin{pending, fromNothing}}},
		{"tools-review-reply", model.ToolsReviewReply{Changes: []model.ToolPin{}}},
	}
	checkModelDocs(t, r, docs)
	if len(strict.Changed) != 5 {
		t.Errorf("changed members %v, want every member but name", strict.Changed)
	}
}
