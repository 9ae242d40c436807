package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// The protocol versions of the two eras /mcp serves: a session (initialize)
// and go-sdk's newest (2026-07-28, no session).
const sessionEra = "2025-11-25"

// pinsOf lists the server's pending tool changes over REST.
func (e *mcpEnv) pinsOf(t *testing.T, slug string) []model.ToolPin {
	t.Helper()
	r := httpDo(t, "GET", e.url+"/api/v1/servers/"+slug+"/pins", e.admin, nil)
	var out rest.PinsReply
	r.decode(t, &out)
	if r.status != http.StatusOK {
		t.Fatalf("GET pins of %s: %d %s", slug, r.status, r.body)
	}
	return out.Changes
}

// waitPending waits until the server's tool has a pending definition.
func (e *mcpEnv) waitPending(t *testing.T, slug, tool string) model.ToolPin {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, p := range e.pinsOf(t, slug) {
			if p.Tool == tool && p.Pending != nil {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pending change of %s/%s within 30s: %+v", slug, tool, e.pinsOf(t, slug))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// restart restarts the server over REST: the runner lists its tools again.
func (e *mcpEnv) restart(t *testing.T, slug string) {
	t.Helper()
	if r := httpDo(t, "POST", e.url+"/api/v1/servers/"+slug+"/restart", e.admin, nil); r.status != http.StatusOK {
		t.Fatalf("restart %s: %d %s", slug, r.status, r.body)
	}
}

// describedAs is a waitList condition: tool is listed with description desc
// ("" = not listed at all).
func describedAs(tool, desc string) func(map[string]*mcp.Tool) bool {
	return func(tools map[string]*mcp.Tool) bool {
		got, ok := tools[tool]
		if desc == "" {
			return !ok
		}
		return ok && got.Description == desc
	}
}

// busTools lists the server's tools on the bus (tools.list) by name.
func (e *mcpEnv) busTools(t *testing.T, slug string) map[string]string {
	t.Helper()
	tools, err := e.st.Client.ListTools(ctxT(t, 30*time.Second), slug)
	if err != nil {
		t.Fatalf("tools.list %s: %v", slug, err)
	}
	out := map[string]string{}
	for _, tl := range tools {
		out[tl.Tool] = tl.Description
	}
	return out
}

// rpcTools lists the server's tools through rpc tools/list (passed to the
// server itself, filtered by the runner).
func (e *mcpEnv) rpcTools(t *testing.T, slug string) map[string]string {
	t.Helper()
	var list mcp.ListToolsResult
	if err := e.st.Client.RPC(ctxT(t, 30*time.Second), slug, "tools/list", nil, &list); err != nil {
		t.Fatalf("rpc tools/list %s: %v", slug, err)
	}
	out := map[string]string{}
	for _, tl := range list.Tools {
		out[tl.Name] = tl.Description
	}
	return out
}

// busCall calls the tool on the bus and tells whether the result is an
// error, with its text.
func (e *mcpEnv) busCall(t *testing.T, slug, tool string) (bool, string) {
	t.Helper()
	data, err := e.st.Client.Call(ctxT(t, 30*time.Second), slug, tool, json.RawMessage(`{"message":"hi"}`), nil)
	if err != nil {
		t.Fatalf("call %s/%s on the bus: %v", slug, tool, err)
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatalf("call %s/%s on the bus: not a CallToolResult: %s", slug, tool, data)
	}
	return res.IsError, textOf(&res)
}

// toolChanged reads the next tool_changed event of the stream (REST
// /api/v1/events?kinds=tool_changed).
func toolChanged(t *testing.T, s *sseStream, within time.Duration) (model.ToolChangedEvent, bool) {
	t.Helper()
	select {
	case f, ok := <-s.frames:
		if !ok {
			t.Fatal("the event stream ended")
		}
		var ev rest.Event
		var tc model.ToolChangedEvent
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil || ev.Kind != "tool_changed" || json.Unmarshal(ev.Data, &tc) != nil {
			t.Fatalf("not a tool_changed event: %s (%v)", f.data, err)
		}
		return tc, true
	case <-time.After(within):
		return model.ToolChangedEvent{}, false
	}
}

// TestPinnedToolDefinitions: under pin strict, a server that changes a
// tool's description silently (on its second tools/list) and one that
// renames a tool with notifications/tools/list_changed do not reach /mcp
// clients of either era, the bus (tools.list, rpc tools/list, tools.call)
// or the chat: the changed tool is withheld, its calls refused; the change
// is announced with a diff and listed over REST, where only an admin may
// approve the exact definition reviewed, after which it shows everywhere.
func TestPinnedToolDefinitions(t *testing.T) {
	t.Parallel()
	c := startChat(t)
	events := openSSE(t, c.url+"/api/v1/events?kinds=tool_changed", c.admin)
	driftCfg := remoteConfig("drift", testmcp.ServeServerHTTP(t, testmcp.NewDriftServer("drift"), nil, nil))
	driftCfg.Pin = model.PinStrict
	drift := c.enable(t, driftCfg)
	session := connectMCPAt(t, c.url, c.admin, sessionEra)
	modern := connectMCP(t, c.url, c.admin)
	for _, s := range []*mcpSession{session, modern} {
		waitList(t, s.ClientSession, 30*time.Second, "showed drift__lookup as pinned", describedAs("drift__lookup", testmcp.DriftBefore))
	}

	// The server answers rpc tools/list itself (its second list: drifted):
	// the runner leaves out what it did not accept.
	if got := c.rpcTools(t, drift); len(got) != 0 {
		t.Fatalf("rpc tools/list passed a silently changed tool: %v", got)
	}
	// A restart lists the tools again: the change is seen, withheld, announced.
	c.restart(t, drift)
	pending := c.waitPending(t, drift, "lookup")
	if pending.Hash == pending.Pending.Hash || !bytes.Contains(pending.Pending.Definition, []byte("id_rsa")) || bytes.Contains(pending.Definition, []byte("id_rsa")) {
		t.Fatalf("pending change %+v", pending)
	}
	ev, ok := toolChanged(t, events, 30*time.Second)
	if !ok || ev.Server != drift || ev.Tool != "lookup" || !ev.Withheld || ev.Policy != model.PinStrict ||
		!slices.Equal(ev.Changed, []string{"description"}) || ev.NewHash != pending.Pending.Hash {
		t.Fatalf("tool_changed event %+v (received %v)", ev, ok)
	}
	for _, s := range []*mcpSession{session, modern} {
		waitList(t, s.ClientSession, 30*time.Second, "withheld drift__lookup", describedAs("drift__lookup", ""))
		res, err := callTool(t, s.ClientSession, "drift__lookup", map[string]any{"message": "hi"})
		if err == nil && !res.IsError {
			t.Fatalf("a withheld tool answered over /mcp: %s", textOf(res))
		}
	}
	if got := c.busTools(t, drift); len(got) != 0 {
		t.Fatalf("tools.list of %s offers %v while its tool is withheld", drift, got)
	}
	if got := c.rpcTools(t, drift); len(got) != 0 {
		t.Fatalf("rpc tools/list of %s offers %v while its tool is withheld", drift, got)
	}
	if isErr, text := c.busCall(t, drift, "lookup"); !isErr || !strings.Contains(text, "withheld") {
		t.Fatalf("a call of the withheld tool on the bus: isError %v, %s", isErr, text)
	}

	// The chat offers the model the pinned tools only; a call of the
	// withheld one fails.
	c.putProfile(t, "pinned", nil)
	c.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("drift__lookup", `{"message":"hi"}`)), llmtest.Text("could not"))
	conv := uuid.NewString()
	chatEvents := openSSE(t, c.url+"/api/v1/chat/conversations/"+conv+"/events", c.chat)
	if r := httpDo(t, "POST", c.url+"/api/v1/chat/conversations", c.chat, model.ChatSendRequest{Conversation: conv, Profile: "pinned", Message: "look it up"}); r.status != http.StatusAccepted {
		t.Fatalf("POST conversations: %d %s", r.status, r.body)
	}
	states := toolStates(chatEvents.until(t, time.Minute, isDone))
	if !slices.Contains(states, "drift__lookup:"+model.ToolCallFailed) || slices.Contains(states, "drift__lookup:"+model.ToolCallCompleted) {
		t.Fatalf("the chat's call of the withheld tool: %q", states)
	}
	// The turn's first model request offers the tools (the next one carries the call).
	reqs := c.llm.Requests()
	first := slices.IndexFunc(reqs, func(r llmtest.Request) bool { return bytes.Contains(r.Body, []byte("tm__echo")) })
	if first < 0 || bytes.Contains(reqs[first].Body, []byte("drift__lookup")) {
		t.Fatalf("the model was not offered the pinned tools only (%d requests, first offer at %d)", len(reqs), first)
	}
	for _, req := range reqs {
		if bytes.Contains(req.Body, []byte("id_rsa")) {
			t.Fatalf("the changed description reached the model: %s", req.Body)
		}
	}

	// Review over REST: admin only, and the hash names what was reviewed.
	approve := c.url + "/api/v1/servers/" + drift + "/pins/approve"
	if r := httpDo(t, "POST", approve, c.chat, rest.PinDecision{Tool: "lookup", Hash: pending.Pending.Hash}); r.status != http.StatusForbidden {
		t.Fatalf("approve with a chat key: %d %s", r.status, r.body)
	}
	r := httpDo(t, "POST", approve, c.admin, rest.PinDecision{Tool: "lookup", Hash: pending.Hash})
	if e := r.contract(t); r.status != http.StatusConflict || e.Code != apierr.Conflict || e.Field != "hash" {
		t.Fatalf("approve a hash other than the pending one: %d %s", r.status, r.body)
	}
	r = httpDo(t, "POST", approve, c.admin, rest.PinDecision{Tool: "lookup", Hash: pending.Pending.Hash})
	var pin model.ToolPin
	r.decode(t, &pin)
	if r.status != http.StatusOK || pin.Hash != pending.Pending.Hash || pin.Pending != nil {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	for _, s := range []*mcpSession{session, modern} {
		waitList(t, s.ClientSession, 30*time.Second, "showed the approved drift__lookup", describedAs("drift__lookup", testmcp.DriftAfter))
		if got := callText(t, s.ClientSession, "drift__lookup", map[string]any{"message": "approved"}); got != "approved" {
			t.Fatalf("the approved tool answered %q", got)
		}
	}
	if got := c.busTools(t, drift); got["lookup"] != testmcp.DriftAfter {
		t.Fatalf("tools.list after the approval: %v", got)
	}
	if got := c.pinsOf(t, drift); len(got) != 0 {
		t.Fatalf("pending changes after the approval: %+v", got)
	}

	// A rename announced with list_changed: the new name is a tool that
	// appeared after the review, withheld like a change until approved.
	srv, rename := testmcp.NewRenameServer("renamer")
	renCfg := remoteConfig("renamer", testmcp.ServeServerHTTP(t, srv, nil, nil))
	renCfg.Pin = model.PinStrict
	ren := c.enable(t, renCfg)
	waitList(t, modern.ClientSession, 30*time.Second, "showed renamer__lookup", describedAs("renamer__lookup", "Looks a word up"))
	rename()
	pending = c.waitPending(t, ren, "find")
	if pending.Hash != "" || (len(pending.Definition) != 0 && string(pending.Definition) != "null") || !bytes.Contains(pending.Pending.Definition, []byte(testmcp.RenamedDescription)) {
		t.Fatalf("pending rename %+v", pending)
	}
	for _, s := range []*mcpSession{session, modern} {
		tools := waitList(t, s.ClientSession, 30*time.Second, "dropped renamer__lookup", describedAs("renamer__lookup", ""))
		if _, ok := tools["renamer__find"]; ok {
			t.Fatal("the renamed tool was listed before its review")
		}
	}
	if isErr, text := c.busCall(t, ren, "find"); !isErr || !strings.Contains(text, "withheld") {
		t.Fatalf("a call of the renamed tool before its review: isError %v, %s", isErr, text)
	}
	r = httpDo(t, "POST", c.url+"/api/v1/servers/"+ren+"/pins/approve", c.admin, rest.PinDecision{Tool: "find", Hash: pending.Pending.Hash})
	if r.status != http.StatusOK {
		t.Fatalf("approve the rename: %d %s", r.status, r.body)
	}
	waitList(t, session.ClientSession, 30*time.Second, "showed the approved renamer__find", describedAs("renamer__find", testmcp.RenamedDescription))
	if got := callText(t, modern.ClientSession, "renamer__find", map[string]any{"message": "found"}); got != "found" {
		t.Fatalf("the approved renamed tool answered %q", got)
	}
}

// TestPinPolicies: warn lets a changed definition through, pinned anew and
// announced (not withheld, nothing to review); off pins nothing and says
// nothing. Both as docs/security.md says.
func TestPinPolicies(t *testing.T) {
	t.Parallel()
	e := startMCP(t, gateway.Options{EventHeartbeat: 500 * time.Millisecond})
	events := openSSE(t, e.url+"/api/v1/events?kinds=tool_changed", e.admin)
	modern := connectMCP(t, e.url, e.admin)
	for _, policy := range []string{model.PinWarn, model.PinOff} {
		cfg := remoteConfig("drift-"+policy, testmcp.ServeServerHTTP(t, testmcp.NewDriftServer("drift-"+policy), nil, nil))
		cfg.Pin = policy
		slug := e.enable(t, cfg)
		name := slug + "__lookup"
		waitList(t, modern.ClientSession, 30*time.Second, "showed "+name, describedAs(name, testmcp.DriftBefore))
		e.restart(t, slug)
		waitList(t, modern.ClientSession, 30*time.Second, "showed the changed "+name, describedAs(name, testmcp.DriftAfter))
		if got := e.busTools(t, slug); got["lookup"] != testmcp.DriftAfter {
			t.Fatalf("%s: tools.list %v", policy, got)
		}
		if got := e.pinsOf(t, slug); len(got) != 0 {
			t.Fatalf("%s: pending changes %+v", policy, got)
		}
		ev, ok := toolChanged(t, events, 3*time.Second)
		switch {
		case policy == model.PinWarn && (!ok || ev.Server != slug || ev.Withheld || ev.Policy != model.PinWarn || !slices.Equal(ev.Changed, []string{"description"})):
			t.Fatalf("warn: tool_changed %+v (received %v)", ev, ok)
		case policy == model.PinOff && ok:
			t.Fatalf("off: a tool_changed event %+v", ev)
		}
	}
}
