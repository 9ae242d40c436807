package testmcp

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// OwnURI is the one resource of NewLinkServer.
const OwnURI = "link://own"

// NewLinkServer is a server with one resource, OwnURI ("own content of
// <name>"), and a tool, links, whose result names resources: a
// resource_link to OwnURI, and a resource_link and an embedded resource
// with the URI foreign (another server's resource, as the gateway spells
// it: a cross-server link); its prompt, linked, names foreign too.
func NewLinkServer(name, foreign string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1.0.0"}, nil)
	s.AddResource(&mcp.Resource{URI: OwnURI, Name: "own", MIMEType: "text/plain"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "own content of " + name}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "links", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.ResourceLink{URI: OwnURI, Name: "own"},
				&mcp.ResourceLink{URI: foreign, Name: "foreign"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: foreign, MIMEType: "text/plain", Text: "see there"}},
			}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "linked"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.ResourceLink{URI: foreign, Name: "foreign"}}}}, nil
	})
	return s
}
