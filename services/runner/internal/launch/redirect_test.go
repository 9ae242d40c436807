package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
)

// A remote server's redirect of a call to another origin is not followed:
// the configured headers (an API key) would go wherever the server points,
// another host, an address inside the runner's network, or http after
// https. A redirect within the server's own origin still is.
func TestHTTPRedirectStaysOnTheOrigin(t *testing.T) {
	const secret = "sk-live-REDIRECT0123456789"
	var mu sync.Mutex
	var elsewhere []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		elsewhere = append(elsewhere, r.Method+" "+r.URL.String()+" key="+r.Header.Get("X-Api-Key"))
		mu.Unlock()
		http.Error(w, "not here", http.StatusNotFound)
	}))
	defer other.Close()
	var target string // where calls are sent: another origin, or this one's /mcp?moved=1
	url := testmcp.ServeHTTP(t, "web", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if r.Method == http.MethodPost && bytes.Contains(body, []byte(`"tools/call"`)) && r.URL.Query().Get("moved") == "" {
				http.Redirect(w, r, target, http.StatusTemporaryRedirect)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	cfg := &model.McpConfig{Name: "web", Slug: "web", Transport: model.Transport{Type: model.TransportHTTP, URL: url,
		Headers: map[string]string{"X-Api-Key": secret}}}
	l, err := Prepare(context.Background(), cfg, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.http.DisableStandaloneSSE = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, l.Transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sess.Close() }()
	raw := l.Connected(sess)
	args := json.RawMessage(`{"message":"hi"}`)

	for _, to := range []string{other.URL + "/mcp", strings.Replace(other.URL, "127.0.0.1", "localhost", 1) + "/mcp"} {
		target = to
		_, _, rawErr := raw.CallTool(ctx, "echo", args, nil)
		_, sdkErr := sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi"}})
		for name, err := range map[string]error{"raw call": rawErr, "go-sdk call": sdkErr} {
			if err == nil || !strings.Contains(err.Error(), "redirect") {
				t.Errorf("%s redirected to %s: %v, want an error saying the redirect was refused", name, to, err)
			}
		}
	}
	mu.Lock()
	seen := strings.Join(elsewhere, "\n")
	mu.Unlock()
	if seen != "" {
		t.Errorf("the other origin was sent requests:\n%s", seen)
	}

	target = url + "?moved=1" // the same origin
	res, _, err := raw.CallTool(ctx, "echo", args, nil)
	if err != nil || !bytes.Contains(res, []byte(`"text":"hi"`)) {
		t.Fatalf("raw call redirected within the origin: %s %v", res, err)
	}
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi"}}); err != nil {
		t.Fatalf("go-sdk call redirected within the origin: %v", err)
	}
}
