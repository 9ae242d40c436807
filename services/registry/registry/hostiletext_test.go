package registry_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
)

// hiddenRunes are characters a registry's text must not carry to the
// people reading it: C1 controls (U+009B is CSI to terminals that read
// 8-bit controls) and the bidi marks, embeddings, overrides and isolates
// that make text display in another order than it is stored.
const hiddenRunes = "\u0085\u009b\u202a\u202c\u202e\u2066\u2069\u200e\u200f\u061c"

func hasHidden(s string) bool { return strings.ContainsAny(s, hiddenRunes) }

// Registry text (titles, descriptions) reaches terminals, the console and
// the config's name without C1 controls or bidi controls.
func TestRegistryTextWithoutC1OrBidiControls(t *testing.T) {
	hostile := "Safe \u202egnp.exe\u202c \u2066tool\u2069 \u200fx\u200e\u061c \u009b2J\u0085 end"
	entry, _ := json.Marshal(map[string]any{"server": map[string]any{
		"name": "io.github.hostile/text", "version": "1.0.0", "title": hostile, "description": hostile,
		"remotes": []any{map[string]any{"type": "streamable-http", "url": "https://mcp.example.com/mcp"}},
	}})
	e := start(t, setup{official: []json.RawMessage{entry}})
	r := e.search(t, model.RegistrySearchRequest{Query: "text", Registry: model.RegistryOfficial})
	raw, _ := json.Marshal(r)
	if len(r.Results) != 1 {
		t.Fatalf("results: %s", raw)
	}
	if hasHidden(r.Results[0].Title + r.Results[0].Description) {
		t.Errorf("search result keeps hidden characters: %q", r.Results[0].Title+" / "+r.Results[0].Description)
	}
	plan := e.get(t, model.RegistryGetRequest{Name: "io.github.hostile/text"})
	if plan.Draft == nil {
		t.Fatalf("no draft: %+v", plan)
	}
	for what, s := range map[string]string{"title": plan.Title, "description": plan.Description, "draft name": plan.Draft.Name} {
		if hasHidden(s) {
			t.Errorf("plan %s keeps hidden characters: %q", what, s)
		}
	}
}
