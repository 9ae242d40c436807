package loop

import (
	"cmp"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/toolsearch"
	"github.com/mcpbus/mcpbus/services/chat/provider"
)

// Search mode: when the tools a turn may call (the profile's filter ∩ the
// sender's) outnumber the profile's tool budget, the model is offered the
// built-in search_tools plus the tools its searches found in the
// conversation (ToolResult.Found, so a resumed turn offers the same), never
// the whole catalog. A found tool is then called by its own name. The index
// holds the whole catalog; each search keeps only the turn's tools, so the
// filters hold for what is found as for what is run (runCall resolves a
// name in the same filtered catalog).

// SearchToolsTool is the built-in tool of search mode.
const SearchToolsTool = "search_tools"

var searchToolsSpec = provider.ToolSpec{
	Name: SearchToolsTool,
	Description: "Finds the tools that best match a query (words of what you want to do), best first. " +
		"There are too many tools to list them all: search first. The tools found are offered to you from the next step on; call them directly by name.",
	InputSchema: []byte(`{"type":"object","required":["query"],"additionalProperties":false,"properties":{` +
		`"query":{"type":"string","minLength":1,"maxLength":1000,"description":"what you want to do, in words"},` +
		`"limit":{"type":"integer","minimum":1,"maximum":50,"description":"the most tools to return (default 10)"}}}`),
}

// searchLimitMax bounds a search's limit, as search_tools' schema says.
const searchLimitMax = 50

// budget is the most catalog tools a step offers at once.
func (t *turn) budget() int { return cmp.Or(t.profile.ToolBudget, model.DefaultChatToolBudget) }

// foundTools are the tools the conversation's searches found that the turn
// may still call, the most recently found last, at most budget of them.
func (t *turn) foundTools(s *state, byName map[string]model.Tool) []model.Tool {
	var out []model.Tool
	for i := len(s.found) - 1; i >= 0 && len(out) < t.budget(); i-- {
		if tl, ok := byName[s.found[i]]; ok {
			out = append(out, tl)
		}
	}
	slices.Reverse(out)
	return out
}

// indexCatalog brings the engine's index in line with the catalog, server
// by server. A server's stamp is the sum of its tools' hashes (order does
// not matter), so an unchanged catalog costs a hash per tool and no copy.
func (e *Engine) indexCatalog(all []model.Tool) {
	stamps := map[string]uint64{}
	var h maphash.Hash
	h.SetSeed(e.seed)
	for i := range all {
		tl := &all[i]
		if tl.Name == "" {
			continue
		}
		h.Reset()
		for _, part := range [...]string{tl.Name, tl.Title, tl.Description} {
			h.WriteString(part)
			h.WriteByte(0)
		}
		h.Write(tl.InputSchema)
		stamps[tl.Server] += h.Sum64()
	}
	e.search.Retain(func(srv string) bool { _, ok := stamps[srv]; return ok })
	for srv, sum := range stamps {
		stamp := strconv.FormatUint(sum, 16)
		if old, ok := e.search.Stamp(srv); ok && old == stamp {
			continue
		}
		var tools []model.Tool
		for _, tl := range all {
			if tl.Server == srv && tl.Name != "" {
				tools = append(tools, tl)
			}
		}
		e.search.SetServer(srv, stamp, tools)
	}
}

// searchTools serves search_tools over the turn's catalog byName; found
// are the names of the tools it returns.
func (t *turn) searchTools(args json.RawMessage, byName map[string]model.Tool) (content string, found []string, failed bool) {
	var in model.ToolsSearchRequest
	if err := json.Unmarshal(args, &in); err != nil {
		return SearchToolsTool + `: arguments must be {"query": string, "limit": integer}`, nil, true
	}
	in.Limit = min(in.Limit, searchLimitMax, t.budget())
	if err := toolsearch.Check(&in); err != nil {
		return SearchToolsTool + ": " + apierr.From(err).Message, nil, true
	}
	hits := t.e.search.Search(in.Query, in.Limit, func(tl *model.Tool) bool { _, ok := byName[tl.Name]; return ok })
	if len(hits) == 0 {
		return fmt.Sprintf("No tool matches %q. Try other words.", in.Query), nil, false
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Found %d tools, best first. They are offered to you from the next step on: call them directly by name.\n", len(hits))
	for _, h := range hits {
		found = append(found, h.Tool.Name)
		fmt.Fprintf(&b, "- %s: %s\n", h.Tool.Name, clip(strings.Join(strings.Fields(cmp.Or(h.Tool.Description, h.Tool.Title)), " "), 300))
	}
	return strings.TrimSpace(b.String()), found, false
}
