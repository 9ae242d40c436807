package runner

import (
	"context"
	"maps"
	"strings"

	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/toolsearch"
)

// handleToolsSearch answers mcp.v1.tools.search (and an agent's own): the
// catalog's tools ranked against the query, only those the caller may call.
// The index follows r.catalog lazily: each search first re-indexes the
// servers whose catalog changed since the last one (toolsearch.Sync), so a
// catalog change costs nothing until someone searches.
func (r *Runner) handleToolsSearch(ctx context.Context, req micro.Request) (any, error) {
	var in model.ToolsSearchRequest
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	if err := toolsearch.Check(&in); err != nil {
		return nil, err
	}
	c, _, err := r.admitted(req.Subject())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	cats := maps.Clone(r.catalog)
	r.mu.Unlock()
	r.searchIndex.Sync(cats)
	hits := r.searchIndex.Search(in.Query, in.Limit, func(t *model.Tool) bool {
		return c.agent == "" || c.record.Allows(model.ToolNames(t.Name, t.Server, t.Tool)...)
	})
	out := model.ToolsSearchReply{Tools: make([]model.Tool, 0, len(hits)), Scores: make([]float64, 0, len(hits))}
	own := r.subj.ForAgent(c.agent).Prefix + "."
	for _, h := range hits {
		if c.agent != "" { // an agent calls on its own subjects, as in visibleTools
			h.Tool.Subject = own + strings.TrimPrefix(h.Tool.Subject, r.subj.Prefix+".")
		}
		out.Tools = append(out.Tools, h.Tool)
		out.Scores = append(out.Scores, h.Score)
	}
	return out, nil
}
