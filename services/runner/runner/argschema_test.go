package runner_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// Arguments that fail the tool's input schema get, on the bus, the tool
// error /mcp gives (libs/toolargs), not the server's own words; the server
// never sees them. Arguments that fit reach it.
func TestArgumentsCheckedAgainstTheSchema(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("alpha", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	for _, args := range []string{`{"message":5}`, `{}`, `{"message":"x","extra":1}`} {
		raw, err := call(t, e, "alpha", "echo", args)
		if err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		var res struct {
			Content []struct{ Type, Text string } `json:"content"`
			IsError bool                          `json:"isError"`
		}
		if json.Unmarshal(raw, &res) != nil || !res.IsError || len(res.Content) != 1 || res.Content[0].Type != "text" ||
			!strings.HasPrefix(res.Content[0].Text, "arguments do not match the input schema of echo: ") {
			t.Fatalf("%s: %s", args, raw)
		}
	}
	raw, err := call(t, e, "alpha", "echo", `{"message":"fits"}`)
	if err != nil || !strings.Contains(string(raw), `"fits"`) || strings.Contains(string(raw), `"isError":true`) {
		t.Fatalf("valid arguments: %s %v", raw, err)
	}
}
