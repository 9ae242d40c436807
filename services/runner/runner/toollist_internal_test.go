package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/testmcp"
)

// endlessTools serves the test server, except that tools/list answers
// perPage tools of descLen-byte descriptions and always a next cursor.
func endlessTools(t *testing.T, perPage, descLen int) string {
	var pages atomic.Int32
	return testmcp.ServeHTTP(t, "endless", &mcp.StreamableHTTPOptions{JSONResponse: true}, testmcp.AnswerMethod("tools/list", func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		page := pages.Add(1)
		var tools []string
		for i := range perPage {
			tools = append(tools, fmt.Sprintf(`{"name":"t%d_%d","description":%q,"inputSchema":{"type":"object"}}`, page, i, strings.Repeat("d", descLen)))
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[%s],"nextCursor":"p%d"}}`, id, strings.Join(tools, ","), page)
	}))
}

// A server whose tool list never ends, in small pages or large ones, is
// refused at its bounds instead of filling the runner's memory until the
// start times out.
func TestToolListBounded(t *testing.T) {
	for _, tc := range []struct {
		name             string
		perPage, descLen int
		want             string
	}{
		{"empty pages", 0, 0, "past 1000 pages"},
		{"many tools", 1000, 10, "at most 5000 tools"},
		{"large tools", 10, 1 << 20, "a catalog of at most 8188 KiB"},
		{"one tool over half a message", 1, 5 << 20, "tools of at most 4094 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := endlessTools(t, tc.perPage, tc.descLen)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
			sess, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			_, err = listTools(ctx, sess, 8<<20-4<<10) // the embedded bus's limit less the headroom
			if apierr.Of(err) != apierr.Validation || !strings.Contains(apierr.From(err).Message, tc.want) {
				t.Fatalf("listTools: %v, want VALIDATION_ERROR saying %q", err, tc.want)
			}
		})
	}
}
