//lint:file-ignore SA1019 sampling is deprecated by protocol 2026-07-28 (SEP-2577) but servers of older protocols use it: mcpbus relays it.

package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

const redactedAWS = "[REDACTED:aws-access-token]"

// heardServer is an HTTP server with a prompt, completions, resources and
// subscriptions; heard returns the bodies of the requests of method it got.
func heardServer(t *testing.T) (url string, heard func(method string) []string) {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "heard", Version: "1"}, &mcp.ServerOptions{
		CompletionHandler: func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{"x"}}}, nil
		},
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	s.AddPrompt(&mcp.Prompt{Name: "p", Arguments: []*mcp.PromptArgument{{Name: "token"}}}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "ok"}}}}, nil
	})
	s.AddResource(&mcp.Resource{URI: "test://r", Name: "r"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "ok"}}}, nil
	})
	var mu sync.Mutex
	var bodies []string
	url = testmcp.ServeServerHTTP(t, s, nil, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies = append(bodies, string(body))
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
			h.ServeHTTP(w, r)
		})
	})
	return url, func(method string) []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, b := range bodies {
			if strings.Contains(b, `"method":"`+method+`"`) {
				out = append(out, b)
			}
		}
		return out
	}
}

// What a caller sends a server outside tools/call (a prompt's arguments, a
// completion's value and context, a resource's URI) comes under the
// server's secret_scan.arguments policy as a tool's arguments do: blocked
// (the default: VALIDATION_ERROR naming the rule and the field, the server
// asked nothing), redacted before the server sees it, or off.
func TestSecretsInRequestsBesidesArguments(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	heard := map[string]func(string) []string{}
	put := func(name, arguments string) {
		url, h := heardServer(t)
		heard[name] = h
		putScanned(t, e, name, url, model.SecretsPolicy{Arguments: arguments, Results: model.SecretsOff})
	}
	put("strict", "") // the default: block
	put("lenient", model.SecretsRedact)
	put("open", model.SecretsOff)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	key := testAWSKey
	requests := []struct{ method, params, field string }{
		{"prompts/get", `{"name":"p","arguments":{"token":"` + key + `"}}`, "params.arguments.token"},
		{"completion/complete", `{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"token","value":"` + key + `"}}`, "params.argument.value"},
		{"completion/complete", `{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"token","value":"k"},"context":{"arguments":{"other":"` + key + `"}}}`, "params.context.arguments.other"},
		{"resources/read", `{"uri":"test://r/` + key + `"}`, "params.uri"},
		{"resources/subscribe", `{"uri":"test://r/` + key + `"}`, "params.uri"},
	}
	rpc := func(server, method, params string) error {
		var out json.RawMessage
		return e.Client.RPC(ctx, server, method, json.RawMessage(params), &out)
	}
	for _, r := range requests {
		err := rpc("strict", r.method, r.params)
		var ae *apierr.Error
		if !errors.As(err, &ae) || ae.Code != apierr.Validation || ae.Field != r.field ||
			!strings.Contains(ae.Message, "aws-access-token") || strings.Contains(ae.Message, key) {
			t.Errorf("strict: %s: %v (field %q), want VALIDATION_ERROR naming the rule, field %s", r.method, err, fieldOf(ae), r.field)
		}
		_ = rpc("lenient", r.method, r.params) // a redacted URI names no resource: the error does not matter
		_ = rpc("open", r.method, r.params)
	}
	for _, method := range []string{"prompts/get", "completion/complete", "resources/read", "resources/subscribe"} {
		if got := heard["strict"](method); len(got) != 0 {
			t.Errorf("strict: the server got %s: %q", method, got)
		}
		got := strings.Join(heard["lenient"](method), "\n")
		if got == "" || strings.Contains(got, key) || !strings.Contains(got, redactedAWS) {
			t.Errorf("lenient: the server got %s: %q, want the key redacted", method, got)
		}
		if got := strings.Join(heard["open"](method), "\n"); !strings.Contains(got, key) {
			t.Errorf("open: the server got %s: %q, want it as sent (arguments off)", method, got)
		}
	}
}

func fieldOf(e *apierr.Error) string {
	if e == nil {
		return ""
	}
	return e.Field
}

// askingServer is a shared HTTP server of protocol 2025-11-25 whose tools
// ask its client for input (ask: elicitation/create) and a model's answer
// (sample: sampling/createMessage), with a secret in what they ask when
// leak is set, and return what the answer was.
func askingServer(t *testing.T) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "asking", Version: "1"},
		&mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	type in struct {
		Leak bool `json:"leak"`
	}
	said := func(leak bool) string {
		if leak {
			return " " + testAWSKey
		}
		return ""
	}
	result := func(text string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "ask"}, func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		schema := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{
			"name": {Type: "string", Description: "as in" + said(a.Leak)}}}
		res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "your name?" + said(a.Leak), RequestedSchema: schema})
		if err != nil {
			return result("refused: " + err.Error()), nil, nil
		}
		return result(fmt.Sprintf("%s %v", res.Action, res.Content["name"])), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "sample"}, func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10, SystemPrompt: "be brief" + said(a.Leak),
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "say" + said(a.Leak)}}}})
		if err != nil {
			return result("refused: " + err.Error()), nil, nil
		}
		text, _ := res.Content.(*mcp.TextContent)
		if text == nil {
			return result("no text"), nil, nil
		}
		return result("said " + text.Text), nil, nil
	})
	return testmcp.ServeServerHTTP(t, s, nil, nil)
}

// A server's requests of its caller (elicitation/create, sampling/createMessage)
// come under its results policy, since they reach the caller and its model
// as a result does: redacted (the default), or under block refused (the
// server gets a JSON-RPC error naming the rule, the caller nothing). The
// caller's answers come under its arguments policy: blocked (the default:
// the server gets an error), redacted, or off.
func TestSecretsInClientRequestsAndAnswers(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	url := askingServer(t)
	put := func(name, arguments, results string) {
		e.Put(t, model.McpConfig{Name: name, Enabled: true, Package: model.Package{Type: model.PackageHTTP, Identifier: url},
			Transport:  model.Transport{Type: model.TransportHTTP, URL: url},
			SecretScan: model.SecretsPolicy{Arguments: arguments, Results: results}, Runtime: model.Runtime{Eager: true}})
		e.WaitState(t, name, model.StateRunning, 10*time.Second)
	}
	put("defaults", "", "")                                // arguments block, results redact
	put("turned", model.SecretsRedact, model.SecretsBlock) // the other way round
	put("open", model.SecretsOff, model.SecretsOff)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := testAWSKey

	// call calls tool with leak; the caller answers with text in the
	// answer's field. It returns the tool's text and what the caller was
	// asked ("" when it was not).
	call := func(server, tool string, leak bool, text string) (string, string) {
		var asked atomic.Value
		asked.Store("")
		res, err := e.Client.Call(ctx, server, tool, json.RawMessage(fmt.Sprintf(`{"leak":%t}`, leak)), &client.CallOptions{
			OnClientRequest: func(_ context.Context, req model.ClientRequest) (any, error) {
				asked.Store(string(req.Params))
				if req.Method == model.MethodElicit {
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": text}}, nil
				}
				return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: text}}, nil
			}})
		if err != nil {
			t.Fatalf("%s: %s: %v", server, tool, err)
		}
		return resultText(t, res), asked.Load().(string)
	}
	for _, tool := range []string{"ask", "sample"} {
		// The server's request.
		got, asked := call("defaults", tool, true, "Ada")
		if strings.Contains(asked, key) || strings.Count(asked, redactedAWS) != 2 || !strings.HasSuffix(got, " Ada") {
			t.Errorf("defaults: %s: the caller was asked %s (the tool said %q), want both secrets redacted", tool, asked, got)
		}
		got, asked = call("turned", tool, true, "Ada")
		if asked != "" || !strings.HasPrefix(got, "refused: ") || !strings.Contains(got, "aws-access-token") || strings.Contains(got, key) {
			t.Errorf("turned: %s: the caller was asked %q, the tool said %q; want the request refused naming the rule", tool, asked, got)
		}
		if got, asked = call("open", tool, true, "Ada"); !strings.Contains(asked, key) {
			t.Errorf("open: %s: the caller was asked %s (the tool said %q), want it as sent", tool, asked, got)
		}
		// The caller's answer.
		got, _ = call("defaults", tool, false, "key "+key)
		if !strings.HasPrefix(got, "refused: ") || !strings.Contains(got, "aws-access-token") || strings.Contains(got, key) {
			t.Errorf("defaults: %s: the tool said %q, want the answer withheld naming the rule", tool, got)
		}
		if got, _ = call("turned", tool, false, "key "+key); !strings.HasSuffix(got, " key "+redactedAWS) {
			t.Errorf("turned: %s: the tool said %q, want the answer redacted", tool, got)
		}
		if got, _ = call("open", tool, false, "key "+key); !strings.HasSuffix(got, " key "+key) {
			t.Errorf("open: %s: the tool said %q, want the answer as given", tool, got)
		}
	}
}

// A server of protocol 2026-07-28 asks for input in a multi round-trip
// result, which go-sdk fulfils through the same relay: scanned the same.
func TestSecretsInMultiRoundTripRequests(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	cfg := runnertest.Binary("alpha", testServer)
	cfg.SecretScan = model.SecretsPolicy{Arguments: model.SecretsOff} // the key reaches the server in the arguments
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var asked string
	_, err := e.Client.Call(ctx, "alpha", "ask", json.RawMessage(`{"message":"key `+testAWSKey+`"}`), &client.CallOptions{
		OnClientRequest: func(_ context.Context, req model.ClientRequest) (any, error) {
			asked = string(req.Params)
			return &mcp.ElicitResult{Action: "decline"}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(asked, testAWSKey) || !strings.Contains(asked, "key "+redactedAWS) {
		t.Fatalf("the caller was asked %s, want the key redacted", asked)
	}
}

func resultText(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var r callResult
	if err := json.Unmarshal(raw, &r); err != nil || len(r.Content) == 0 {
		t.Fatalf("result is not a CallToolResult with content: %v: %s", err, raw)
	}
	return r.Content[0].Text
}
