package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// callCounter counts the tool calls that cross the bus (any server, any tool).
func callCounter(t *testing.T, nc *nats.Conn) func() int64 {
	t.Helper()
	c := testkit.Count(t, nc, "mcp.v1.call.>")
	return func() int64 { return c.Settled(t) }
}

func invoke(t *testing.T, h *gw, key string, body any) (int, rest.InvokeReply) {
	t.Helper()
	r := h.do("POST", "/mcp/invoke", key, body)
	var out rest.InvokeReply
	r.decode(t, &out)
	return r.status, out
}

func wantFailure(t *testing.T, status int, out rest.InvokeReply, wantStatus int, wantType string, wantField string) {
	t.Helper()
	if status != wantStatus || out.Success || out.ErrorType != wantType || out.Error == "" {
		t.Fatalf("got %d %+v, want %d %s", status, out, wantStatus, wantType)
	}
	if out.Details == nil || out.Details.Message == "" || !out.Details.Code.Valid() {
		t.Fatalf("details must carry the error contract: %+v", out.Details)
	}
	if wantField != "" && out.Details.Field != wantField {
		t.Fatalf("details.field %q, want %q", out.Details.Field, wantField)
	}
}

func TestToolsAndInvoke(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	runServer(t, e, "alpha", nil)
	runServer(t, e, "crashy", nil)
	runServer(t, e, "slow", func(c *model.McpConfig) { c.Runtime.CallTimeout = model.Duration(300 * time.Millisecond) })
	h := startGateway(t, e, gateway.Options{})
	caller := h.key(model.KeyCreateRequest{Scopes: []string{"call"}}).Key
	echo := h.waitTool(caller, "alpha__echo")
	h.waitTool(caller, "slow__sleep")
	h.waitTool(caller, "crashy__crash")
	calls := callCounter(t, e.NC)

	t.Run("tools list has the seeds/001 shape", func(t *testing.T) {
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(echo.Parameters, &schema); err != nil || schema.Type != "object" || schema.Properties["message"] == nil {
			t.Fatalf("parameters of alpha__echo are not its input schema: %s", echo.Parameters)
		}
		if echo.Description != "Echoes the message back" {
			t.Fatalf("description %q", echo.Description)
		}
		r := h.do("GET", "/mcp/tools", caller, nil)
		var raw struct {
			Tools []map[string]json.RawMessage `json:"tools"`
		}
		r.decode(t, &raw)
		for _, tool := range raw.Tools {
			if len(tool) != 3 || tool["name"] == nil || tool["description"] == nil || tool["parameters"] == nil {
				t.Fatalf("tool entry must be {name, description, parameters}: %v", tool)
			}
		}
	})

	t.Run("happy path", func(t *testing.T) {
		before := calls()
		status, out := invoke(t, h, caller, map[string]any{"tool_name": "alpha__echo", "params": map[string]any{"message": "hi there"}})
		if status != http.StatusOK || !out.Success || out.Error != "" || out.ErrorType != "" {
			t.Fatalf("got %d %+v", status, out)
		}
		var res struct {
			Content []struct{ Text string } `json:"content"`
		}
		if err := json.Unmarshal(out.Result, &res); err != nil || len(res.Content) != 1 || res.Content[0].Text != "hi there" {
			t.Fatalf("result %s", out.Result)
		}
		if n := calls() - before; n != 1 {
			t.Fatalf("%d calls crossed the bus, want 1", n)
		}
	})

	t.Run("tool error is success false SERVICE_ERROR", func(t *testing.T) {
		status, out := invoke(t, h, caller, map[string]any{"tool_name": "alpha__fail", "params": map[string]any{"message": "boom"}})
		if status != http.StatusOK || out.Success || out.ErrorType != rest.ErrService || !strings.Contains(out.Error, "boom") {
			t.Fatalf("got %d %+v", status, out)
		}
		var res struct {
			IsError bool `json:"isError"`
		}
		if err := json.Unmarshal(out.Result, &res); err != nil || !res.IsError {
			t.Fatalf("result must be the CallToolResult with isError: %s", out.Result)
		}
	})

	t.Run("schema violations are refused before any bus traffic", func(t *testing.T) {
		before := calls()
		for _, params := range []any{
			map[string]any{"message": 5}, // wrong type
			map[string]any{},             // missing required
			map[string]any{"message": "x", "extra": map[string]int{}}, // additionalProperties false
		} {
			status, out := invoke(t, h, caller, map[string]any{"tool_name": "alpha__echo", "params": params})
			wantFailure(t, status, out, http.StatusBadRequest, rest.ErrParameter, "params")
			if out.Details.Code != apierr.Validation {
				t.Fatalf("details.code %s", out.Details.Code)
			}
			// The message /mcp gives in its isError result (libs/toolargs).
			if !strings.HasPrefix(out.Error, "arguments do not match the input schema of alpha__echo: ") {
				t.Fatalf("message %q", out.Error)
			}
		}
		if n := calls() - before; n != 0 {
			t.Fatalf("%d calls crossed the bus for invalid params", n)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		before := calls()
		for _, c := range []struct {
			body  any
			field string
		}{
			{`{"tool_name": "alpha__echo", "params": `, ""},                            // malformed JSON
			{`{"tool_name": "alpha__echo", "arguments": {}}`, ""},                      // unknown field
			{map[string]any{"params": map[string]any{}}, "tool_name"},                  // no tool name
			{map[string]any{"tool_name": "echo"}, "tool_name"},                         // not namespaced
			{map[string]any{"tool_name": "alpha__echo", "params": []int{1}}, "params"}, // not an object
			{map[string]any{"tool_name": "alpha__echo", "params": "hi"}, "params"},
		} {
			status, out := invoke(t, h, caller, c.body)
			// Bad params are PARAMETER_ERROR however they are bad (not an
			// object here, not fitting the schema above): one error type per
			// kind of error.
			typ := rest.ErrValidation
			if c.field == "params" {
				typ = rest.ErrParameter
			}
			wantFailure(t, status, out, http.StatusBadRequest, typ, c.field)
			if out.Details.Code != apierr.Validation {
				t.Fatalf("details.code %s", out.Details.Code)
			}
		}
		if n := calls() - before; n != 0 {
			t.Fatalf("%d calls crossed the bus for bad requests", n)
		}
	})

	t.Run("unknown tool is 404 TOOL_NOT_FOUND", func(t *testing.T) {
		for _, name := range []string{"alpha__nope", "nosuch__echo"} {
			status, out := invoke(t, h, caller, map[string]any{"tool_name": name, "params": map[string]any{}})
			wantFailure(t, status, out, http.StatusNotFound, rest.ErrToolMissing, "tool_name")
		}
	})

	t.Run("timeout is 504 SERVICE_ERROR", func(t *testing.T) {
		status, out := invoke(t, h, caller, map[string]any{"tool_name": "slow__sleep", "params": map[string]any{"ms": 5000}})
		wantFailure(t, status, out, http.StatusGatewayTimeout, rest.ErrService, "")
		if out.Details.Code != apierr.Network {
			t.Fatalf("details.code %s", out.Details.Code)
		}
	})

	t.Run("server exiting during the call is 503", func(t *testing.T) {
		status, out := invoke(t, h, caller, map[string]any{"tool_name": "crashy__crash", "params": map[string]any{}})
		wantFailure(t, status, out, http.StatusServiceUnavailable, rest.ErrUnavailable, "")
	})
}

func TestPerKeyToolFilter(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	runServer(t, e, "alpha", nil)
	runServer(t, e, "beta", nil)
	h := startGateway(t, e, gateway.Options{})
	all := h.key(model.KeyCreateRequest{Scopes: []string{"call"}}).Key
	h.waitTool(all, "alpha__echo")
	h.waitTool(all, "beta__echo")
	onlyEcho := h.key(model.KeyCreateRequest{Scopes: []string{"call"}, Tools: model.ToolFilter{Allow: []string{"*__echo"}, Deny: []string{"beta__*"}}}).Key
	calls := callCounter(t, e.NC)

	r := h.do("GET", "/mcp/tools", onlyEcho, nil)
	var out rest.ToolsReply
	r.decode(t, &out)
	if len(out.Tools) != 1 || out.Tools[0].Name != "alpha__echo" {
		names := []string{}
		for _, tool := range out.Tools {
			names = append(names, tool.Name)
		}
		t.Fatalf("filtered key sees %v, want only alpha__echo", names)
	}
	for _, name := range []string{"alpha__env", "beta__echo"} {
		status, res := invoke(t, h, onlyEcho, map[string]any{"tool_name": name, "params": map[string]any{"name": "HOME", "message": "x"}})
		wantFailure(t, status, res, http.StatusNotFound, rest.ErrToolMissing, "tool_name")
	}
	if n := calls(); n != 0 {
		t.Fatalf("%d calls crossed the bus for filtered tools", n)
	}
	status, res := invoke(t, h, onlyEcho, map[string]any{"tool_name": "alpha__echo", "params": map[string]any{"message": "ok"}})
	if status != http.StatusOK || !res.Success {
		t.Fatalf("allowed tool: %d %+v", status, res)
	}
	// The unfiltered key still sees and calls everything.
	status, res = invoke(t, h, all, map[string]any{"tool_name": "beta__echo", "params": map[string]any{"message": "ok"}})
	if status != http.StatusOK || !res.Success {
		t.Fatalf("unfiltered key: %d %+v", status, res)
	}
}
