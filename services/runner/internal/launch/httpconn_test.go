package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
)

// tokenAuth is an OAuthHandler with a fixed token that counts its fetches
// and refuses every 401 as the runner's does.
type tokenAuth struct {
	token      string
	fetches    atomic.Int32
	authorized atomic.Int32
}

func (a *tokenAuth) TokenSource(context.Context) (oauth2.TokenSource, error) { return a, nil }
func (a *tokenAuth) Token() (*oauth2.Token, error) {
	a.fetches.Add(1)
	return &oauth2.Token{AccessToken: a.token}, nil
}
func (a *tokenAuth) Authorize(_ context.Context, _ *http.Request, resp *http.Response) error {
	a.authorized.Add(1)
	_ = resp.Body.Close()
	return errors.New("refused: " + resp.Status)
}

// connectHTTP connects a go-sdk client to url through Prepare's HTTP
// transport, as the runner does, and returns the session and its raw connection.
func connectHTTP(t *testing.T, url string, opts Options, edit ...func(*HTTPTransport)) (*mcp.ClientSession, *HTTPConn) {
	t.Helper()
	cfg := &model.McpConfig{Name: "web", Slug: "web", Transport: model.Transport{Type: model.TransportHTTP, URL: url}}
	l, err := Prepare(context.Background(), cfg, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range edit {
		f(l.Transport.(*HTTPTransport))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, l.Transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	c, ok := l.Connected(sess).(*HTTPConn)
	if !ok {
		t.Fatalf("raw connection %T", l.Connected(sess))
	}
	return sess, c
}

// A raw call carries the OAuth handler's token, like go-sdk's requests; a
// 401 goes to the handler, whose error the call returns.
func TestHTTPConnOAuth(t *testing.T) {
	var refuse atomic.Bool
	url := testmcp.ServeHTTP(t, "web", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer tok-1" || refuse.Load() {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	auth := &tokenAuth{token: "tok-1"}
	// Without the standalone stream, whose GET fetches a token of its own.
	_, c := connectHTTP(t, url, Options{Auth: auth}, func(ht *HTTPTransport) { ht.DisableStandaloneSSE = true })
	before := auth.fetches.Load()
	res, id, err := c.CallTool(context.Background(), "echo", json.RawMessage(`{"message":"hi"}`), nil)
	if err != nil || !bytes.Contains(res, []byte(`"text":"hi"`)) || !strings.HasPrefix(id.String(), "mcpbus-") {
		t.Fatalf("echo: %s %s %v", res, id, err)
	}
	if n := auth.fetches.Load() - before; n != 1 {
		t.Fatalf("%d token fetches for one call, want 1 (from the handler's source)", n)
	}
	refuse.Store(true)
	_, _, err = c.CallTool(context.Background(), "echo", json.RawMessage(`{"message":"hi"}`), nil)
	if err == nil || !strings.Contains(err.Error(), "refused: 401") || auth.authorized.Load() != 1 {
		t.Fatalf("refused call: %v (handler asked %d times)", err, auth.authorized.Load())
	}
}

// A JSON-RPC error answer comes back as *jsonrpc.Error, as from go-sdk.
func TestHTTPConnErrorResponse(t *testing.T) {
	for _, opts := range []*mcp.StreamableHTTPOptions{nil, {JSONResponse: true}} {
		_, c := connectHTTP(t, testmcp.ServeHTTP(t, "web", opts, nil), Options{})
		_, _, err := c.CallTool(context.Background(), "nope", nil, nil)
		var we *jsonrpc.Error
		if !errors.As(err, &we) {
			t.Fatalf("json=%v: unknown tool: %T %v", opts != nil, err, err)
		}
	}
}

// A raw call given up (its context ended) returns the context's error at
// once, and the server hears notifications/cancelled for it.
func TestHTTPConnCancel(t *testing.T) {
	var mu sync.Mutex
	var cancelled []string
	url := testmcp.ServeHTTP(t, "web", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				body, _ := io.ReadAll(r.Body)
				if bytes.Contains(body, []byte("notifications/cancelled")) {
					mu.Lock()
					cancelled = append(cancelled, string(body))
					mu.Unlock()
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
			h.ServeHTTP(w, r)
		})
	})
	_, c := connectHTTP(t, url, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, id, err := c.CallTool(ctx, "sleep", json.RawMessage(`{"ms":5000}`), nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("sleep: %v after %s", err, time.Since(start))
	}
	want := `"requestId":"` + id.String() + `"`
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		got := strings.Join(cancelled, "\n")
		mu.Unlock()
		if strings.Contains(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server heard no cancellation of %s: %q", id, got)
		}
	}
}

// The SSE answer of a raw call is read as the spec describes it (comments,
// named events, data over several lines, other messages first), and a
// server that keeps the stream open after the response does not hold the
// call back.
func TestHTTPConnEventStream(t *testing.T) {
	url := testmcp.ServeHTTP(t, "web", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			id, ok := strings.CutPrefix(string(body), `{"jsonrpc":"2.0","id":"`)
			if r.Method != http.MethodPost || !ok || !strings.HasPrefix(id, "mcpbus-") {
				r.Body = io.NopCloser(bytes.NewReader(body))
				h.ServeHTTP(w, r)
				return
			}
			id, _, _ = strings.Cut(id, `"`)
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, ": a comment\r\n\r\n"+
				"event: ping\ndata: {\"ignored\":true}\n\n"+
				"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"hi\"}}\n\n"+
				"id: 7\ndata: {\"jsonrpc\":\"2.0\",\"id\":\""+id+"\",\n"+
				"data: \"result\":{\"content\":[{\"type\":\"text\",\"text\":\"streamed\"}]}}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done() // the stream stays open
		})
	})
	_, c := connectHTTP(t, url, Options{})
	start := time.Now()
	res, _, err := c.CallTool(context.Background(), "echo", nil, nil)
	if err != nil || !bytes.Contains(res, []byte(`"text":"streamed"`)) {
		t.Fatalf("call: %s %v", res, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the open stream held the call for %s", d)
	}
}

// The standalone stream is opened after the handshake and not asked for
// again when the server offers none (405).
func TestHTTPConnStandaloneStream(t *testing.T) {
	var gets atomic.Int32
	url := testmcp.ServeHTTP(t, "web", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				gets.Add(1)
				http.Error(w, "no stream here", http.StatusMethodNotAllowed)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	_, c := connectHTTP(t, url, Options{})
	time.Sleep(1500 * time.Millisecond) // past the first pause before another attempt
	if n := gets.Load(); n != 1 {
		t.Fatalf("%d GETs of the standalone stream, want 1", n)
	}
	if _, _, err := c.CallTool(context.Background(), "echo", json.RawMessage(`{"message":"x"}`), nil); err != nil {
		t.Fatal(err)
	}
}

// go-sdk's own requests after the handshake carry the agreed protocol
// version, as they would on its unwrapped connection.
func TestHTTPConnVersionOnGoSDKRequests(t *testing.T) {
	versions := make(chan string, 16)
	url := testmcp.ServeHTTP(t, "web", nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, []byte(`"method":"tools/list"`)) {
				versions <- r.Header.Get("Mcp-Protocol-Version")
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			h.ServeHTTP(w, r)
		})
	})
	sess, _ := connectHTTP(t, url, Options{})
	if _, err := sess.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if v := <-versions; v != sess.InitializeResult().ProtocolVersion {
		t.Fatalf("tools/list carried version %q, want %q", v, sess.InitializeResult().ProtocolVersion)
	}
}
