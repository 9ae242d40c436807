package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
)

// A server whose slug is so long that its tools' namespaced names are
// shortened to 64 characters: the hash suffix takes the place of "__", and
// the listed name still calls the tool through /mcp/invoke and libs/client,
// while a name of no tool without "__" is still refused as malformed.
func TestLongSlugToolsAreCallableByListedName(t *testing.T) {
	t.Parallel()
	e := start(t)
	slug := strings.Repeat("l", 60)
	cfg := testServerConfig(slug)
	cfg.Slug = slug
	if r := e.do("POST", "/api/v1/servers", model.ConfigCreateRequest{Config: cfg}); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/api/v1/servers/"+slug+"/enable", nil); r.status != http.StatusOK {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	e.waitState(slug, model.StateRunning)
	name := model.NamespacedName(slug, "echo")
	if strings.Contains(name, "__") || len(name) != model.MaxNameLen {
		t.Fatalf("the test wants a shortened name without __, got %q", name)
	}
	waitTools(t, e, func(names []string) bool { return contains(names, name) })

	r := e.do("POST", "/mcp/invoke", rest.InvokeRequest{ToolName: name, Params: json.RawMessage(`{"message":"long"}`)})
	var out rest.InvokeReply
	r.decode(t, &out)
	if r.status != http.StatusOK || !out.Success {
		t.Fatalf("/mcp/invoke %s: %d %s", name, r.status, r.body)
	}
	if !strings.Contains(string(out.Result), `"long"`) {
		t.Errorf("/mcp/invoke %s returned %s", name, out.Result)
	}

	got, err := e.st.Client.CallNamed(ctxT(t, 30*time.Second), name, json.RawMessage(`{"message":"named"}`), nil)
	if err != nil || !strings.Contains(string(got), `"named"`) {
		t.Errorf("CallNamed %s: %s, %v", name, got, err)
	}

	none := e.do("POST", "/mcp/invoke", rest.InvokeRequest{ToolName: strings.Repeat("m", 64), Params: json.RawMessage(`{}`)})
	if none.status != http.StatusBadRequest || !strings.Contains(string(none.body), "namespaced name") {
		t.Errorf("a name of no tool without __: %d %s, want 400 naming the form", none.status, none.body)
	}
	// A key whose filter leaves the tool out gets what a name of no tool
	// gets: the listed name tells it nothing.
	var other model.KeyCreateReply
	e.do("POST", "/api/v1/keys", model.KeyCreateRequest{Name: "other", Scopes: []string{model.KeyScopeCall},
		Tools: model.ToolFilter{Allow: []string{"elsewhere__*"}}}).decode(t, &other)
	r = e.doKey(other.Key, "POST", "/mcp/invoke", rest.InvokeRequest{ToolName: name, Params: json.RawMessage(`{"message":"x"}`)})
	if r.status != none.status || strings.Contains(string(r.body), `"x"`) {
		t.Errorf("another key's call of %s: %d %s, want %d as for no tool", name, r.status, r.body, none.status)
	}
}
