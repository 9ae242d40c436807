package runner_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A tool that declares an output schema and returns structuredContent that
// breaks it (or none) gets an isError result naming the violation in its
// stead, so no front door serves a result its tool's schema says cannot be;
// a conforming result passes as the server gave it, an error result
// without the structuredContent that breaks the schema.
func TestResultCheckedAgainstOutputSchema(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	url := testmcp.ServeServerHTTP(t, testmcp.NewOutputSchemaServer("counter"), nil, nil)
	e.Put(t, model.McpConfig{Name: "counter", Enabled: true, Package: model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url}, Runtime: model.Runtime{Eager: true}})
	e.WaitState(t, "counter", model.StateRunning, 10*time.Second)
	for tool, want := range map[string]struct {
		isError    bool
		text       string
		structured string
	}{
		"count":     {false, `{"n":1}`, `{"n":1}`},
		"miscount":  {true, "the result of tool miscount does not match its output schema", ""},
		"uncounted": {true, "the result of tool uncounted does not match its output schema: it has no structuredContent", ""},
		"failed":    {true, "could not count", ""},
	} {
		raw, err := call(t, e, "counter", tool, `{}`)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		var res struct {
			IsError           bool            `json:"isError"`
			StructuredContent json.RawMessage `json:"structuredContent"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatalf("%s: %s", tool, raw)
		}
		if res.IsError != want.isError || !strings.Contains(text(t, raw), want.text) || string(res.StructuredContent) != want.structured {
			t.Errorf("%s: %s", tool, raw)
		}
	}
}

// A server's output schema and its structuredContent are both its own: an
// enum of 2,001 entries over a result of 1,000 items took the runner 1.3 s
// of a core to check (ten times both: two minutes), on every call. Such a
// result is withheld without being checked, an isError result saying why;
// a few items are checked as before.
func TestResultTooCostlyToCheckIsWithheld(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	url := testmcp.ServeServerHTTP(t, testmcp.NewCostlyOutputServer("picker"), nil, nil)
	e.Put(t, model.McpConfig{Name: "picker", Enabled: true, Package: model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url}, Runtime: model.Runtime{Eager: true}})
	e.WaitState(t, "picker", model.StateRunning, 10*time.Second)

	raw, err := call(t, e, "picker", "few", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.IsError || string(res.StructuredContent) != `{"a":[1,1,1]}` {
		t.Fatalf("few: %s", raw)
	}

	start := time.Now()
	raw, err = call(t, e, "picker", "many", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	res.StructuredContent = nil
	if err := json.Unmarshal(raw, &res); err != nil || !res.IsError || res.StructuredContent != nil ||
		!strings.Contains(text(t, raw), "the result of tool many was withheld: its structuredContent is too costly to check") {
		t.Fatalf("many (after %s): %s", time.Since(start), raw)
	}
}
