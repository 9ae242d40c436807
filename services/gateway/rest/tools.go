package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/runnerwatch"
	"github.com/mcpbus/mcpbus/libs/schemaguard"
	"github.com/mcpbus/mcpbus/libs/toolargs"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/internal/restarts"
)

// Error types of POST /mcp/invoke, with their HTTP status:
//
//	VALIDATION_ERROR    400  malformed request, or a tool name that is not <server>__<tool>
//	                         (413 and 415 for a body too large or not JSON)
//	PARAMETER_ERROR     400  bad params: not a JSON object, or not fitting the tool's input
//	                         schema (checked here, before any call), or refused by the server
//	                         (details.code is VALIDATION_ERROR, details.field params…)
//	TOOL_NOT_FOUND      404  no such tool (not in the catalog), or the key may not see it
//	SERVICE_ERROR       200  the tool ran and answered isError: success false, result holds its content
//	SERVICE_ERROR       504  the call timed out (401 when the server's upstream refused its
//	                         credentials: details say UNAUTHORIZED "Authentication failed.
//	                         Check your API key."; 409 only for a call racing the server's
//	                         disabling: a disabled server's tools leave the catalog, 404)
//	SERVICE_UNAVAILABLE 503  no runner answered, the server is starting or in error
//	                         (restarting after a crash: with Retry-After, the seconds until its restart,
//	                         once this gateway has seen the crash;
//	                         a listed tool whose server no runner serves, a failover under way:
//	                         Retry-After 5, a lease's time; the runner serving the call died
//	                         during it, seen when its heartbeat expired: Retry-After 5)
//	INTERNAL_ERROR      500  anything else
//
// A tool's own error (isError) is a result, not a failure of the gateway, so
// it keeps 200, as MCP keeps it out of JSON-RPC errors: clients that look only
// at the status still see success false and the tool's message.
const (
	ErrValidation  = "VALIDATION_ERROR"
	ErrParameter   = "PARAMETER_ERROR"
	ErrToolMissing = "TOOL_NOT_FOUND"
	ErrService     = "SERVICE_ERROR"
	ErrUnavailable = "SERVICE_UNAVAILABLE"
	ErrInternal    = "INTERNAL_ERROR"
)

// ToolInfo is one entry of GET /mcp/tools.
type ToolInfo struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// ToolsReply is the body of GET /mcp/tools.
type ToolsReply struct {
	Tools []ToolInfo `json:"tools"`
}

// InvokeRequest is the body of POST /mcp/invoke.
type InvokeRequest struct {
	ToolName string          `json:"tool_name"`
	Params   json.RawMessage `json:"params,omitempty"`
}

// InvokeReply is the body of every POST /mcp/invoke answer. Details is the
// error contract {code,message,field} of a failure.
type InvokeReply struct {
	Success   bool            `json:"success"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     string          `json:"error,omitempty"`
	ErrorType string          `json:"error_type,omitempty"`
	Details   *apierr.Error   `json:"details,omitempty"`
}

var emptyObjectSchema = json.RawMessage(`{"type":"object"}`)

func (a *API) listTools(w http.ResponseWriter, r *http.Request) {
	p := auth.PrincipalFrom(r.Context())
	out := ToolsReply{Tools: []ToolInfo{}}
	for _, t := range a.catalog.tools() {
		if !p.AllowsTool(model.ToolNames(t.Name, t.Server, t.Tool)...) {
			continue
		}
		params := t.InputSchema
		if len(params) == 0 {
			params = emptyObjectSchema
		}
		out.Tools = append(out.Tools, ToolInfo{Name: t.Name, Description: t.Description, Parameters: params})
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) invoke(w http.ResponseWriter, r *http.Request) {
	// Every failure takes its status and error type from invokeFailure, so
	// the same error (code and field) always has the same error_type.
	failWith := func(status int, e *apierr.Error) {
		_, typ := invokeFailure(e)
		writeJSON(w, status, InvokeReply{Error: e.Message, ErrorType: typ, Details: e})
	}
	fail := func(e *apierr.Error) {
		status, _ := invokeFailure(e)
		failWith(status, e)
	}
	var in InvokeRequest
	if status, err := readJSON(r, &in, false); err != nil {
		failWith(status, err) // 413 and 415 keep their status
		return
	}
	name := strings.TrimSpace(in.ToolName)
	if name == "" {
		fail(apierr.Invalid("tool_name", "tool_name is required"))
		return
	}
	if server, _, ok := strings.Cut(name, "__"); !ok || !model.ValidSlug(server) {
		// A listed name shortened to 64 characters (a long slug) may have lost
		// its "__" to the hash suffix: such a name is one if the key sees it.
		if _, listed := a.catalog.tool(name); !listed || !auth.PrincipalFrom(r.Context()).AllowsTool(name) {
			fail(apierr.Invalid("tool_name", "tool_name must be a namespaced name <server>__<tool> (see GET /mcp/tools)"))
			return
		}
	}
	params := bytes.TrimSpace(in.Params)
	if len(params) == 0 || bytes.Equal(params, []byte("null")) {
		params = []byte("{}")
	}
	var args map[string]any
	if params[0] != '{' || json.Unmarshal(params, &args) != nil {
		fail(apierr.Invalid("params", "params must be a JSON object"))
		return
	}
	// Made only when needed: building it costs 4 allocations a call.
	notFound := func() *apierr.Error {
		return apierr.Newf(apierr.NotFound, "tool %s not found", name).WithField("tool_name")
	}
	tool, ok := a.visibleTool(r, name)
	if !ok {
		fail(notFound())
		return
	}
	name = tool.Name // as listed, when the call named it as its server does
	if err := a.schemas.validate(tool.InputSchema, args); err != nil {
		// The message /mcp gives (as an isError result); the field is this body's.
		fail(toolargs.Mismatch(name, err).WithField("params"))
		return
	}
	if wait, ok := a.catalog.restarting(tool.Server); ok {
		secs := model.RetryAfterSeconds(wait)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		fail(apierr.Newf(apierr.ServiceUnavailable,
			"server %s is restarting after a crash; retry after %d s", tool.Server, secs))
		return
	}
	if a.opts.Approvals != nil {
		// The caller cannot be asked: a held call waits for an approver.
		msg, err := a.opts.Approvals.Enforce(r.Context(), approvals.Call{Principal: auth.PrincipalFrom(r.Context()).Bus().ID,
			Server: tool.Server, Tool: name, ServerTool: tool.Tool, Arguments: params,
			Deferred: strings.EqualFold(r.Header.Get(bus.HeaderTask), "true")}, nil) // a task runs after this request
		if err != nil {
			fail(apierr.From(err))
			return
		}
		if msg != "" {
			writeJSON(w, http.StatusOK, InvokeReply{Error: msg, ErrorType: ErrService, Details: apierr.New(apierr.Unauthorized, msg)})
			return
		}
	}
	if strings.EqualFold(r.Header.Get(bus.HeaderTask), "true") {
		// A durable task instead of the call: its handle, as POST /api/v1/tasks answers.
		task, err := a.client.CreateTask(r.Context(), tool.Server, tool.Tool, params)
		if err != nil {
			fail(apierr.From(err))
			return
		}
		w.Header().Set("Location", "/api/v1/tasks/"+url.PathEscape(task.ID))
		writeJSON(w, http.StatusAccepted, task)
		return
	}
	got, err := a.client.CallResult(r.Context(), tool.Server, tool.Tool, params, nil)
	if restarts.NoOwner(err) {
		// Listed but unserved: a failover under way, not an unknown tool.
		w.Header().Set("Retry-After", strconv.Itoa(model.RetryAfterSeconds(restarts.FailoverRetry)))
		fail(restarts.Unavailable(name, tool.Server))
		return
	}
	if errors.Is(err, client.ErrRunnerGone) {
		// Its runner died during the call (runnerwatch): another takes the
		// server over within a lease's time.
		w.Header().Set("Retry-After", strconv.Itoa(model.RetryAfterSeconds(runnerwatch.Retry)))
		fail(apierr.From(err))
		return
	}
	if err != nil {
		e := apierr.From(err)
		if wait, ok := a.catalog.restarting(tool.Server); ok && e.Code == apierr.ServiceUnavailable {
			// The runner saw the crash before this gateway did.
			w.Header().Set("Retry-After", strconv.Itoa(model.RetryAfterSeconds(wait)))
		}
		if model.NotAuthorized(err) {
			e = a.withAuthorizationURL(r.Context(), tool.Server, e)
		}
		// The runner names the call's arguments; here they are params.
		if rest, ok := strings.CutPrefix(e.Field, "arguments"); ok && (rest == "" || rest[0] == '.' || rest[0] == '[') {
			e = e.WithField("params" + rest)
		}
		fail(e)
		return
	}
	raw := got.Data
	if got.Checked && !got.IsError {
		// The runner checked the result: it goes out as it came, never
		// decoded or encoded again.
		writeInvokeResult(w, raw)
		return
	}
	var res struct {
		IsError bool `json:"isError"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		fail(apierr.Wrap(apierr.Internal, "the tool result is not a CallToolResult", err))
		return
	}
	out := InvokeReply{Success: !res.IsError, Result: raw}
	if res.IsError {
		var msg []string
		for _, c := range res.Content {
			if c.Type == "text" && c.Text != "" {
				msg = append(msg, c.Text)
			}
		}
		out.Error = truncate(strings.Join(msg, "\n"), 2000)
		if out.Error == "" {
			out.Error = "the tool reported an error"
		}
		out.ErrorType = ErrService
	}
	writeJSON(w, http.StatusOK, out)
}

// invokeOK and invokeEnd frame a successful reply around the tool's result:
// InvokeReply{Success: true, Result: raw} as encoding/json writes it.
var (
	invokeOK  = []byte(`{"success":true,"result":`)
	invokeEnd = []byte("}\n")
)

// writeInvokeResult answers a successful /mcp/invoke with raw, a CallToolResult
// the runner checked, copied once into the response, and sends it at once
// (as /mcp's answers: the spans and metrics end after the client has it).
func writeInvokeResult(w http.ResponseWriter, raw []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(invokeOK)+len(raw)+len(invokeEnd)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(invokeOK)
	_, _ = w.Write(raw)
	_, _ = w.Write(invokeEnd)
	_ = http.NewResponseController(w).Flush()
}

// invokeFailure maps a bus error to the HTTP status and error type of /mcp/invoke.
func invokeFailure(e *apierr.Error) (int, string) {
	switch e.Code {
	case apierr.Validation:
		if e.Field == "params" || strings.HasPrefix(e.Field, "params.") || strings.HasPrefix(e.Field, "params[") {
			return http.StatusBadRequest, ErrParameter
		}
		return http.StatusBadRequest, ErrValidation
	case apierr.NotFound:
		return http.StatusNotFound, ErrToolMissing
	case apierr.ServiceUnavailable:
		return http.StatusServiceUnavailable, ErrUnavailable
	case apierr.Network, apierr.Conflict, apierr.RateLimited, apierr.Unauthorized:
		return e.Code.HTTPStatus(), ErrService
	}
	return http.StatusInternalServerError, ErrInternal
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// schemaCache keeps resolved input schemas by their JSON text, so a tool's
// schema is compiled once, not per call. Bounded: it starts over when full.
type schemaCache struct {
	max int
	mu  sync.Mutex
	m   map[string]*schemaguard.Schema
}

func newSchemaCache(max int) *schemaCache {
	return &schemaCache{max: max, m: map[string]*schemaguard.Schema{}}
}

// errNoCheck marks a schema the gateway cannot check (an unsupported draft,
// remote refs): the MCP server still validates the arguments itself.
var errNoCheck = errors.New("schema not checkable here")

// validate checks args against raw (a tool's inputSchema). Schemas the
// library cannot compile are left to the server.
func (c *schemaCache) validate(raw json.RawMessage, args map[string]any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	rs, err := c.resolve(raw)
	if errors.Is(err, errNoCheck) {
		return nil
	}
	// Arguments too costly to check are left to the server too.
	if err := rs.Validate(args); err != nil && !errors.Is(err, schemaguard.ErrCostly) {
		return err
	}
	return nil
}

func (c *schemaCache) resolve(raw json.RawMessage) (*schemaguard.Schema, error) {
	c.mu.Lock()
	rs, ok := c.m[string(raw)] // looked up without copying the schema
	c.mu.Unlock()
	if ok {
		if rs == nil {
			return nil, errNoCheck
		}
		return rs, nil
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err == nil {
		switch s.Schema {
		case "", "http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft-07/schema#",
			"https://json-schema.org/draft/2020-12/schema":
			// A schema that would send the validator into endless (fatal)
			// or exponential recursion is left to the server (schemaguard).
			rs, err = schemaguard.Resolve(raw)
			if err != nil {
				rs = nil
			}
		}
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[string(raw)] = rs // nil remembers "not checkable"
	c.mu.Unlock()
	if rs == nil {
		return nil, errNoCheck
	}
	return rs, nil
}

// visibleTool is the catalog's entry of the tool name names, as the
// request's caller may see it: a tool the key may not use does not exist for
// it, and one this gateway has not listed is looked up on the bus only if
// its name is allowed (/mcp/invoke, POST /api/v1/tasks).
func (a *API) visibleTool(r *http.Request, name string) (model.Tool, bool) {
	p := auth.PrincipalFrom(r.Context())
	tool, ok := a.catalog.tool(name)
	if !ok && p.AllowsTool(name) {
		tool, ok = a.catalog.fresh(r.Context(), name)
	}
	// A key without a filter (most) skips making the tool's names.
	if !ok || !(p != nil && p.Tools.IsZero()) && !p.AllowsTool(model.ToolNames(tool.Name, tool.Server, tool.Tool)...) {
		return model.Tool{}, false
	}
	return tool, true
}
