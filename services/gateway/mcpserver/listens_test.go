package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// listen sends a 2026-07-28 subscriptions/listen as key. Once the stream is
// open (the server acknowledged the subscription) it returns the function
// that ends it; a refused one returns nil and the answer's status and body.
func listen(t *testing.T, url, key string, id int) (end func(), status int, body string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url,
		strings.NewReader(modernBody(id, "subscriptions/listen", `{"notifications":{"toolsListChanged":true}}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	for k, v := range modernHeaders("subscriptions/listen", "") {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("listen %d: %v", id, err)
	}
	end = func() { cancel(); _ = resp.Body.Close() }
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		end()
		return nil, resp.StatusCode, string(b)
	}
	t.Cleanup(end)
	timer := time.AfterFunc(10*time.Second, cancel)
	defer timer.Stop()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") && strings.Contains(sc.Text(), "notifications/subscriptions/acknowledged") {
			return end, resp.StatusCode, ""
		}
	}
	t.Fatalf("listen %d: the stream ended before its acknowledgement: %v", id, sc.Err())
	return nil, 0, ""
}

// One key holds at most MaxListens subscriptions/listen streams open: the
// next is refused in the form of the protocol (a JSON-RPC error naming
// RATE_LIMITED), no other key is affected, and ending one frees its place.
func TestListenStreamsPerKey(t *testing.T) {
	const max = 4
	principals := map[string]*auth.Principal{
		"k-greedy": {KeyID: "k-greedy", Scopes: []string{auth.ScopeCall}},
		"k-other":  {KeyID: "k-other", Scopes: []string{auth.ScopeCall}},
	}
	e := start(t, mcpserver.Options{MaxListens: max}, keys(principals))

	var ends []func()
	for i := range max {
		end, status, body := listen(t, e.url, "k-greedy", i+1)
		if end == nil {
			t.Fatalf("listen stream %d of %d refused: %d %s", i+1, max, status, body)
		}
		ends = append(ends, end)
	}
	end, status, body := listen(t, e.url, "k-greedy", max+1)
	if end != nil {
		t.Fatalf("listen stream %d of a key allowed %d was opened", max+1, max)
	}
	var refused struct {
		ID    any
		Error *jsonrpc.Error
	}
	var data struct{ Code string }
	if err := json.Unmarshal([]byte(body), &refused); err != nil || status != http.StatusBadRequest || refused.Error == nil ||
		refused.Error.Code != jsonrpc.CodeInvalidParams || json.Unmarshal(refused.Error.Data, &data) != nil || data.Code != "RATE_LIMITED" ||
		!strings.Contains(refused.Error.Message, "subscriptions/listen") || fmt.Sprint(refused.ID) != fmt.Sprint(max+1) {
		t.Fatalf("listen stream %d: want HTTP 400 with -32602 RATE_LIMITED, got %d %s", max+1, status, body)
	}

	// Another key is not affected.
	if end, status, body := listen(t, e.url, "k-other", 1); end == nil {
		t.Fatalf("another key's listen stream refused: %d %s", status, body)
	}

	// Ending a stream frees its place (once the gateway sees it end).
	ends[0]()
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		end, status, body := listen(t, e.url, "k-greedy", 100)
		if end == nil {
			return false, fmt.Sprintf("a listen stream after one ended: %d %s", status, body)
		}
		return true, ""
	})
}
