package runner

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A result of a server before 2026-07-28 has no cache hints, and mcp.v1.rpc
// does not invent them; those a server gave are passed on.
func TestRPCReplyCacheHints(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   any
		want string
	}{
		{"no hints", &mcp.ListToolsResult{Tools: []*mcp.Tool{}}, `{"tools":[]}`},
		{"read without hints", &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{}}, `{"contents":[]}`},
		{"a scope and ttl 0", &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}, Cacheable: mcp.Cacheable{CacheScope: "public"}}, `{"ttlMs":0,"cacheScope":"public","prompts":[]}`},
		{"a ttl without scope", &mcp.ListResourcesResult{Resources: []*mcp.Resource{}, Cacheable: mcp.Cacheable{TTLMs: 5}}, `{"resources":[],"ttlMs":5}`},
		{"no cache fields", struct{}{}, `{}`},
	} {
		got, err := rpcReply(tc.in)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s %v, want %s", tc.name, got, err, tc.want)
		}
	}
}
