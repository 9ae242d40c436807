package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// TestResourceLinksStayWithTheirServer: the URIs a server's tool result or
// prompt names (resource_link, embedded resource) are put in the gateway's
// namespace under that server, as its resources/list's are. Before, they
// passed as the server wrote them: a client following a server's link to
// its own resource (link://own) got "not found", and a server naming
// another server's resource in the gateway's spelling
// (mcpbus://victim/test:%2F%2Fgreeting) made a client following it read
// the victim's resource with its user's rights. Both eras, the fast path
// and go-sdk's (a progress token), and prompts/get.
func TestResourceLinksStayWithTheirServer(t *testing.T) {
	t.Parallel()
	e := startMCP(t, gateway.Options{})
	victim := e.enable(t, testServerConfig("victim"))
	foreign := "mcpbus://" + victim + "/test:%2F%2Fgreeting"
	linker := e.enable(t, remoteConfig("linker", testmcp.ServeServerHTTP(t, testmcp.NewLinkServer("linker", foreign), nil, nil)))
	for _, era := range []string{sessionEra, ""} {
		s := connectMCPAt(t, e.url, e.admin, era)
		ctx := ctxT(t, 30*time.Second)
		// The victim's resource is there to read, as the gateway names it.
		if got, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: foreign}); err != nil || !strings.Contains(got.Contents[0].Text, "hello from victim") {
			t.Fatalf("era %q: reading the victim's resource itself: %v", era, err)
		}
		for _, meta := range []mcp.Meta{nil, {"progressToken": "p1"}} {
			res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: linker + "__links", Arguments: map[string]any{}, Meta: meta})
			if err != nil || res.IsError || len(res.Content) != 3 {
				t.Fatalf("era %q: links: %+v %v", era, res, err)
			}
			own, ok1 := res.Content[0].(*mcp.ResourceLink)
			link, ok2 := res.Content[1].(*mcp.ResourceLink)
			emb, ok3 := res.Content[2].(*mcp.EmbeddedResource)
			if !ok1 || !ok2 || !ok3 {
				t.Fatalf("era %q: content %#v", era, res.Content)
			}
			got, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: own.URI})
			if err != nil || got.Contents[0].Text != "own content of linker" {
				t.Errorf("era %q meta %v: following the server's link to its own resource (%s): %v", era, meta, own.URI, err)
			}
			for _, uri := range []string{link.URI, emb.Resource.URI} {
				if got, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil && strings.Contains(got.Contents[0].Text, "victim") {
					t.Errorf("era %q meta %v: a link of linker's (%s) read the victim's resource: %s", era, meta, uri, got.Contents[0].Text)
				}
			}
		}
		p, err := s.GetPrompt(ctx, &mcp.GetPromptParams{Name: linker + "__linked"})
		if err != nil || len(p.Messages) != 1 {
			t.Fatalf("era %q: prompts/get: %v", era, err)
		}
		if l, ok := p.Messages[0].Content.(*mcp.ResourceLink); !ok || l.URI == foreign {
			t.Errorf("era %q: the prompt's link %#v", era, p.Messages[0].Content)
		}
	}
}
