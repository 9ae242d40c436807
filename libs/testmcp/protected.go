package testmcp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpbus/mcpbus/libs/oauthtest"
)

// ServeProtected serves the test server over Streamable HTTP at <url>/mcp
// as an OAuth-protected resource (MCP authorization, 2025-11-25): requests
// need a bearer token the authorization server as issued for this
// resource, a refused one gets 401 with a WWW-Authenticate challenge naming
// the resource metadata (RFC 9728), served at its well-known path. It
// returns the MCP endpoint's URL; the server stops when the test ends.
// Besides NewServer's tools it has whoami, which answers the user the
// call's token stands for (oauthtest.UserParam).
func ServeProtected(t testing.TB, name string, as *oauthtest.Server) string {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	resource := srv.URL + "/mcp"
	prm := srv.URL + "/.well-known/oauth-protected-resource/mcp"
	mux.Handle("GET /.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: resource, AuthorizationServers: []string{as.URL}, BearerMethodsSupported: []string{"header"},
		ScopesSupported: []string{Scope},
	}))
	s := NewServer(name)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "Names the user whose bearer token carried this call"},
		func(ctx context.Context, req *mcp.CallToolRequest, in Empty) (*mcp.CallToolResult, any, error) {
			if req.Extra == nil || req.Extra.TokenInfo == nil {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no token"}}}, nil, nil
			}
			return text(req.Extra.TokenInfo.UserID), nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	mux.Handle("/mcp", auth.RequireBearerToken(as.Verifier(resource), &auth.RequireBearerTokenOptions{ResourceMetadataURL: prm})(h))
	return resource
}

// Scope is the scope ServeProtected's resource metadata names.
const Scope = "mcp:tools"
