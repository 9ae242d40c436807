package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// putScanned puts an eager HTTP server name at url under the secret_scan
// policy scan and waits until it runs.
func putScanned(t *testing.T, e *runnertest.Env, name, url string, scan model.SecretsPolicy) {
	t.Helper()
	e.Put(t, model.McpConfig{Name: name, Enabled: true, Package: model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url}, SecretScan: scan, Runtime: model.Runtime{Eager: true}})
	e.WaitState(t, name, model.StateRunning, 10*time.Second)
}

// leakyServer answers every request but a tool's result with a text that
// holds an AWS key: a progress message, a resource, a prompt, completions.
func leakyServer() *mcp.Server {
	leak := "key " + testAWSKey
	s := mcp.NewServer(&mcp.Implementation{Name: "leaky", Version: "1"}, &mcp.ServerOptions{
		CompletionHandler: func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{leak}}}, nil
		},
	})
	s.AddTool(&mcp.Tool{Name: "work", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1, Message: leak})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
	})
	s.AddResource(&mcp.Resource{URI: "test://leak", Name: "leak", MIMEType: "text/plain"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: leak}}}, nil
	})
	s.AddPrompt(&mcp.Prompt{Name: "leak"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: leak}}}}, nil
	})
	return s
}

// What a server sends its caller besides a tool's result (a call's progress
// messages, resources/read, prompts/get, completion/complete) comes under
// its secret_scan.results policy as the result does: a secret is redacted
// (redact, the default) or the reply withheld (block), and off lets it through.
func TestSecretsInRepliesBesidesResults(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	url := testmcp.ServeServerHTTP(t, leakyServer(), nil, nil)
	put := func(name string, results string) {
		putScanned(t, e, name, url, model.SecretsPolicy{Results: results})
	}
	put("leaky", "") // the default: redact
	put("strict", model.SecretsBlock)
	put("open", model.SecretsOff)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	progress := func(server string) string {
		var mu sync.Mutex
		var msgs []string
		res, err := e.Client.Call(ctx, server, "work", json.RawMessage(`{}`), &client.CallOptions{
			OnProgress: func(ev model.ProgressEvent) { mu.Lock(); msgs = append(msgs, ev.Message); mu.Unlock() },
		})
		if err != nil || text(t, res) != "done" {
			t.Fatalf("%s: work: %s %v", server, res, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(msgs) != 1 {
			t.Fatalf("%s: progress messages %q, want one", server, msgs)
		}
		return msgs[0]
	}
	rpcs := []struct{ method, params string }{
		{"resources/read", `{"uri":"test://leak"}`},
		{"prompts/get", `{"name":"leak"}`},
		{"completion/complete", `{"ref":{"type":"ref/prompt","name":"leak"},"argument":{"name":"a","value":"k"}}`},
	}
	rpc := func(server, method, params string) (string, error) {
		var out json.RawMessage
		err := e.Client.RPC(ctx, server, method, json.RawMessage(params), &out)
		return string(out), err
	}

	if got := progress("leaky"); got != "key [REDACTED:aws-access-token]" {
		t.Errorf("leaky: progress message %q, want it redacted", got)
	}
	if got := progress("strict"); strings.Contains(got, testAWSKey) || !strings.Contains(got, "aws-access-token") {
		t.Errorf("strict: progress message %q, want it withheld naming the rule", got)
	}
	if got := progress("open"); got != "key "+testAWSKey {
		t.Errorf("open: progress message %q, want it as sent (results off)", got)
	}
	for _, r := range rpcs {
		got, err := rpc("leaky", r.method, r.params)
		if err != nil || strings.Contains(got, testAWSKey) || !strings.Contains(got, "key [REDACTED:aws-access-token]") {
			t.Errorf("leaky: %s: %s %v, want the key redacted", r.method, got, err)
		}
		got, err = rpc("strict", r.method, r.params)
		if err == nil || strings.Contains(got+err.Error(), testAWSKey) || !strings.Contains(err.Error(), "aws-access-token") {
			t.Errorf("strict: %s: %s %v, want it withheld naming the rule", r.method, got, err)
		}
		got, err = rpc("open", r.method, r.params)
		if err != nil || !strings.Contains(got, testAWSKey) {
			t.Errorf("open: %s: %s %v, want it as sent (results off)", r.method, got, err)
		}
	}
}
