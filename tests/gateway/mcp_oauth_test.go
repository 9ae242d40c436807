package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/mcpbus/mcpbus/libs/jwtissuer"
)

// TestMCPOAuthUp: `mcpbus up` configured by env (MCPBUS_OAUTH_*) is an OAuth
// protected resource. A client without a token is sent, as go-sdk's client
// discovery walks it, from the 401's resource_metadata to the issuer's
// metadata; a token of that issuer then opens an MCP session that sees and
// calls only the tools its mapped scope grants.
func TestMCPOAuthUp(t *testing.T) {
	t.Parallel()
	iss, err := jwtissuer.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iss.Close)
	bin := mcpbusBin
	var resource string
	up := startUpGatewayEnv(t, bin, func(httpURL string) []string {
		resource = httpURL + "/mcp"
		return []string{"MCPBUS_OAUTH_ISSUER=" + iss.URL(), "MCPBUS_OAUTH_RESOURCE=" + resource,
			"MCPBUS_OAUTH_SCOPE_MAP=mcp:tools=call tool:alpha__*"}
	}, "alpha", "beta")
	if !strings.Contains(up.Output(), "OAuth access tokens of "+iss.URL()) {
		t.Errorf("up does not announce OAuth:\n%s", up.Tail(2000))
	}

	// Discovery, as an OAuth MCP client does it.
	s, err := dialMCP(t, up.httpURL, "")
	metadataURL := up.httpURL + "/.well-known/oauth-protected-resource/mcp"
	wantRefused(t, "no token", s, err, `resource_metadata="`+metadataURL+`"`)
	ctx := ctxT(t, 10*time.Second)
	prm, err := oauthex.GetProtectedResourceMetadata(ctx, metadataURL, resource, http.DefaultClient)
	if err != nil || len(prm.AuthorizationServers) != 1 || prm.AuthorizationServers[0] != iss.URL() {
		t.Fatalf("protected resource metadata: %+v %v", prm, err)
	}
	asm, err := sdkauth.GetAuthServerMetadata(ctx, prm.AuthorizationServers[0], http.DefaultClient)
	if err != nil || asm == nil || asm.JWKSURI != iss.JWKSURL() {
		t.Fatalf("authorization server metadata: %+v %v", asm, err)
	}

	tok, err := iss.Token("ci-agent", resource, "mcp:tools")
	if err != nil {
		t.Fatal(err)
	}
	cs := connectMCP(t, up.httpURL, tok)
	tools := waitList(t, cs.ClientSession, 30*time.Second, "held alpha's echo", func(m map[string]*mcp.Tool) bool {
		return m["alpha__echo"] != nil
	})
	for name := range tools {
		if !strings.HasPrefix(name, "alpha__") {
			t.Errorf("a token granted tool:alpha__* sees %s", name)
		}
	}
	res, err := cs.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"message": "with a token"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "with a token" {
		t.Fatalf("alpha__echo with a token: %+v %v", res, err)
	}
	res, err = cs.CallTool(ctxT(t, 30*time.Second), &mcp.CallToolParams{Name: "beta__echo", Arguments: map[string]any{"message": "no"}})
	if err == nil && !res.IsError {
		t.Fatalf("beta__echo outside the token's tools was called: %+v", res)
	}

	// A token for another resource is refused, with the metadata named.
	other, err := iss.Token("ci-agent", "https://elsewhere.example.test/mcp", "mcp:tools")
	if err != nil {
		t.Fatal(err)
	}
	s, err = dialMCP(t, up.httpURL, other)
	wantRefused(t, "token of another resource", s, err, `error="invalid_token"`)
}
