package model

// ToolsSearchRequest is the body of mcp.v1.tools.search.
type ToolsSearchRequest struct {
	Query string `json:"query"`
	// Limit is the most tools to return (default ToolsSearchDefaultLimit,
	// at most ToolsSearchMaxLimit).
	Limit int `json:"limit,omitempty"`
}

// Bounds of ToolsSearchRequest.Limit.
const (
	ToolsSearchDefaultLimit = 10
	ToolsSearchMaxLimit     = 100
	// ToolsSearchMaxQuery bounds the query, in bytes.
	ToolsSearchMaxQuery = 1000
)

// ToolsSearchReply is the reply of mcp.v1.tools.search: the tools found,
// best match first, each with its full catalog entry; Scores[i] is the BM25
// score of Tools[i].
type ToolsSearchReply struct {
	Tools  []Tool    `json:"tools"`
	Scores []float64 `json:"scores"`
}
