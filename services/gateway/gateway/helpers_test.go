package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// testServer is the go-sdk test MCP server, built once in TestMain.
var testServer string

func TestMain(m *testing.M) {
	testkit.Main(m, &testServer)
}

func quietRunner() runner.Options {
	return runner.Options{StopGrace: 100 * time.Millisecond, StopTimeout: 2 * time.Second, StartTimeout: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler)}
}

// gw is a running gateway on a runnertest bus.
type gw struct {
	t     *testing.T
	e     *runnertest.Env
	g     *gateway.Gateway
	url   string
	admin string
	logs  *testkit.LogBuffer
	stop  context.CancelFunc
	done  chan error
}

// startGateway runs a gateway on e's bus (its own connection) until the test ends.
func startGateway(t *testing.T, e *runnertest.Env, opts gateway.Options) *gw {
	t.Helper()
	nc, err := e.NS.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return startGatewayOn(t, e, nc, opts)
}

// startGatewayCut runs a gateway on e's bus through a connection the test
// can cut (its NATS connection drops and comes back).
func startGatewayCut(t *testing.T, e *runnertest.Env, opts gateway.Options) (*gw, *testkit.Cut) {
	t.Helper()
	cut := testkit.NewCut(t, e.NS.ClientURL())
	nc, err := nats.Connect(cut.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return startGatewayOn(t, e, nc, opts), cut
}

// startGatewayOn runs a gateway on nc until the test ends.
func startGatewayOn(t *testing.T, e *runnertest.Env, nc *nats.Conn, opts gateway.Options) *gw {
	t.Helper()
	logs := &testkit.LogBuffer{}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.DataDir == "" && !opts.NoAuth {
		opts.DataDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := gateway.New(ctx, nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	h := &gw{t: t, e: e, g: g, url: "http://" + g.Addr(), logs: logs, stop: stop, done: make(chan error, 1)}
	go func() { h.done <- g.Run(runCtx) }()
	t.Cleanup(func() { h.shutdown(t) })
	if p := g.AdminKeyPath(); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h.admin = strings.TrimSpace(string(b))
	}
	return h
}

// shutdown stops Run and waits for it.
func (h *gw) shutdown(t *testing.T) {
	if h.stop == nil {
		return
	}
	h.stop()
	h.stop = nil
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("gateway Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Error("gateway did not stop within 15s")
	}
}

// key creates an API key.
func (h *gw) key(req model.KeyCreateRequest) model.KeyCreateReply {
	h.t.Helper()
	if req.Name == "" {
		req.Name = h.t.Name()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	k, err := h.g.Keys().Create(ctx, req)
	if err != nil {
		h.t.Fatal(err)
	}
	return k
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) contract(t *testing.T) apierr.Error {
	t.Helper()
	var e apierr.Error
	if err := json.Unmarshal(r.body, &e); err != nil || e.Code == "" || e.Message == "" {
		t.Fatalf("status %d: body is not the error contract: %s", r.status, r.body)
	}
	return e
}

func (r reply) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("status %d: undecodable body %s: %v", r.status, r.body, err)
	}
}

// do sends a request; body is sent as is when it is []byte or a string,
// else as JSON.
func (h *gw) do(method, path, key string, body any) reply {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, h.url+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return h.send(req)
}

func (h *gw) send(req *http.Request) reply {
	h.t.Helper()
	c := &http.Client{Timeout: 60 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

// waitTool waits until GET /mcp/tools (with key) lists name.
func (h *gw) waitTool(key, name string) rest.ToolInfo {
	h.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := h.do("GET", "/mcp/tools", key, nil)
		var out rest.ToolsReply
		if r.status == http.StatusOK {
			r.decode(h.t, &out)
			for _, t := range out.Tools {
				if t.Name == name {
					return t
				}
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("tool %s not listed after 15s: %d %s", name, r.status, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runServer puts a test server config and waits until it runs.
func runServer(t *testing.T, e *runnertest.Env, slug string, mod func(*model.McpConfig)) {
	t.Helper()
	cfg := runnertest.Binary(slug, testServer)
	if mod != nil {
		mod(&cfg)
	}
	e.Put(t, cfg)
	e.WaitState(t, slug, model.StateRunning, 15*time.Second)
}

// refusal is the error of a refused request to path: the error contract's,
// or under /v1 the OpenAI error object's (its code is the contract's code,
// lower-cased).
func (r reply) refusal(t *testing.T, path string) apierr.Error {
	t.Helper()
	if !strings.HasPrefix(path, "/v1/") {
		return r.contract(t)
	}
	var b struct {
		Error *struct {
			Message, Type string
			Code          *string
		} `json:"error"`
	}
	if json.Unmarshal(r.body, &b) != nil || b.Error == nil || b.Error.Code == nil || b.Error.Message == "" || b.Error.Type == "" {
		t.Fatalf("status %d: body is not an OpenAI error object: %s", r.status, r.body)
	}
	return apierr.Error{Code: apierr.Code(strings.ToUpper(*b.Error.Code)), Message: b.Error.Message}
}
