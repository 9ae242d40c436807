package rest

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/toolsearch"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// ToolsSearchReply is the body of GET /api/v1/tools/search.
type ToolsSearchReply struct {
	Tools []ToolMatch `json:"tools"`
}

// ToolMatch is one found tool in the shape of /mcp/tools, with its score.
type ToolMatch struct {
	ToolInfo
	Title string  `json:"title,omitempty"`
	Score float64 `json:"score"`
}

// searchTools answers GET /api/v1/tools/search?q=&limit= from the
// gateway's own index of the catalog (no bus round trip), searching only
// the tools the key may call.
func (a *API) searchTools(w http.ResponseWriter, r *http.Request) {
	in := model.ToolsSearchRequest{Query: r.URL.Query().Get("q")}
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > model.ToolsSearchMaxLimit { // 0, the bus's "default", is no value here
			writeError(w, apierr.Invalid("limit", fmt.Sprintf("limit must be a number between 1 and %d", model.ToolsSearchMaxLimit)))
			return
		}
		in.Limit = n
	}
	if err := toolsearch.Check(&in); err != nil {
		if e := apierr.From(err); e.Field == "query" {
			e.Field = "q" // the parameter's name here
			err = e
		}
		writeError(w, err)
		return
	}
	p := auth.PrincipalFrom(r.Context())
	hits := a.catalog.search.Search(in.Query, in.Limit, func(t *model.Tool) bool { return p.AllowsTool(model.ToolNames(t.Name, t.Server, t.Tool)...) })
	out := ToolsSearchReply{Tools: make([]ToolMatch, 0, len(hits))}
	for _, h := range hits {
		params := h.Tool.InputSchema
		if len(params) == 0 {
			params = emptyObjectSchema
		}
		out.Tools = append(out.Tools, ToolMatch{ToolInfo: ToolInfo{Name: h.Tool.Name, Description: h.Tool.Description, Parameters: params},
			Title: h.Tool.Title, Score: h.Score})
	}
	writeJSON(w, http.StatusOK, out)
}
