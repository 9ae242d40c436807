// Package testmcp is a small MCP server built on go-sdk for tests and
// benchmarks: tools that echo, sleep, crash, read the environment, return
// large output and report progress, plus a resource and a prompt.
// The mcpbus-testserver command serves it over stdio or Streamable HTTP.
package testmcp

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// EchoIn is the echo tool's input.
type EchoIn struct {
	Message string `json:"message" jsonschema:"the text to echo"`
}

// SleepIn is the sleep tool's input.
type SleepIn struct {
	MS int `json:"ms" jsonschema:"milliseconds to sleep"`
}

// EnvIn is the env tool's input.
type EnvIn struct {
	Name string `json:"name" jsonschema:"the environment variable to read"`
}

// LargeIn is the large tool's input.
type LargeIn struct {
	Bytes int `json:"bytes" jsonschema:"how many bytes of text to return"`
}

// ProgressIn is the progress tool's input.
type ProgressIn struct {
	Steps int `json:"steps" jsonschema:"how many progress notifications to send"`
	MS    int `json:"ms,omitempty" jsonschema:"pause between steps in milliseconds"`
	// Label replaces "step" in the notifications' messages.
	Label string `json:"label,omitempty" jsonschema:"the word before each step's number (default step)"`
}

// Empty is an input with no fields.
type Empty struct{}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// sleep sleeps in.MS, stopping early when cancelled. With TESTMCP_RUN_FILE
// each start appends a line "<tool> <pid>" there, so a test counts runs.
func sleep(ctx context.Context, req *mcp.CallToolRequest, in SleepIn) (*mcp.CallToolResult, any, error) {
	if f := os.Getenv("TESTMCP_RUN_FILE"); f != "" {
		if fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			_, _ = fmt.Fprintf(fh, "%s %d\n", req.Params.Name, os.Getpid())
			_ = fh.Close()
		}
	}
	select {
	case <-time.After(time.Duration(in.MS) * time.Millisecond):
		return text(fmt.Sprintf("slept %dms", in.MS)), nil, nil
	case <-ctx.Done():
		// Leave a trace a test can read: the call was cancelled at the server.
		if f := os.Getenv("TESTMCP_CANCEL_FILE"); f != "" {
			_ = os.WriteFile(f, []byte("cancelled"), 0o600)
		}
		return nil, nil, ctx.Err()
	}
}

// NewServer builds the test server. name lets tests run several distinct ones.
func NewServer(name string) *mcp.Server { return NewServerOpts(name, nil) }

// NewServerOpts is NewServer with go-sdk's server options (e.g. the protocol
// versions it negotiates).
func NewServerOpts(name string, opts *mcp.ServerOptions) *mcp.Server {
	o := mcp.ServerOptions{}
	if opts != nil {
		o = *opts
	}
	// Resource subscriptions are accepted; touch_resource updates one.
	if o.SubscribeHandler == nil && o.UnsubscribeHandler == nil {
		o.SubscribeHandler = func(context.Context, *mcp.SubscribeRequest) error { return nil }
		o.UnsubscribeHandler = func(context.Context, *mcp.UnsubscribeRequest) error { return nil }
	}
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1.0.0"}, &o)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes the message back"},
		func(ctx context.Context, req *mcp.CallToolRequest, in EchoIn) (*mcp.CallToolResult, any, error) {
			return text(in.Message), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sleep", Description: "Sleeps, stopping early when cancelled"}, sleep)
	// The same, declared idempotent (tests of durable tasks re-run only such a tool).
	mcp.AddTool(s, &mcp.Tool{Name: "sleep_idempotent", Description: "Sleeps, stopping early when cancelled; safe to run again",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true}}, sleep)
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Exits the server process at once"},
		func(ctx context.Context, req *mcp.CallToolRequest, in Empty) (*mcp.CallToolResult, any, error) {
			os.Exit(3)
			return nil, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "Returns an environment variable"},
		func(ctx context.Context, req *mcp.CallToolRequest, in EnvIn) (*mcp.CallToolResult, any, error) {
			v, ok := os.LookupEnv(in.Name)
			if !ok {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: in.Name + " is not set"}}}, nil, nil
			}
			return text(v), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "env_sha256", Description: "Returns the SHA-256 (hex) of an environment variable: proves a secret arrived without showing it"},
		func(ctx context.Context, req *mcp.CallToolRequest, in EnvIn) (*mcp.CallToolResult, any, error) {
			v, ok := os.LookupEnv(in.Name)
			if !ok {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: in.Name + " is not set"}}}, nil, nil
			}
			sum := sha256.Sum256([]byte(v))
			return text(hex.EncodeToString(sum[:])), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "large", Description: "Returns a large text"},
		func(ctx context.Context, req *mcp.CallToolRequest, in LargeIn) (*mcp.CallToolResult, any, error) {
			return text(strings.Repeat("x", in.Bytes)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Returns a tool error (isError)"},
		func(ctx context.Context, req *mcp.CallToolRequest, in EchoIn) (*mcp.CallToolResult, any, error) {
			return nil, nil, fmt.Errorf("failed: %s", in.Message)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "progress", Description: "Sends progress notifications, then returns"},
		func(ctx context.Context, req *mcp.CallToolRequest, in ProgressIn) (*mcp.CallToolResult, any, error) {
			token := req.Params.GetProgressToken()
			label := cmp.Or(in.Label, "step")
			for i := 1; i <= in.Steps; i++ {
				if token != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
						ProgressToken: token, Progress: float64(i), Total: float64(in.Steps),
						Message: fmt.Sprintf("%s %d", label, i),
					})
				}
				if in.MS > 0 {
					time.Sleep(time.Duration(in.MS) * time.Millisecond)
				}
			}
			return text(fmt.Sprintf("done %d steps", in.Steps)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add_tool", Description: "Adds a tool named by the message (tests tools/list_changed)"},
		func(ctx context.Context, req *mcp.CallToolRequest, in EchoIn) (*mcp.CallToolResult, any, error) {
			mcp.AddTool(s, &mcp.Tool{Name: in.Message, Description: "added at run time"},
				func(ctx context.Context, req *mcp.CallToolRequest, in Empty) (*mcp.CallToolResult, any, error) {
					return text("added tool"), nil, nil
				})
			return text("added " + in.Message), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "touch_resource", Description: "Says the resource named by the message was updated (tests resource subscriptions)"},
		func(ctx context.Context, req *mcp.CallToolRequest, in EchoIn) (*mcp.CallToolResult, any, error) {
			if err := s.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: in.Message}); err != nil {
				return nil, nil, err
			}
			return text("touched " + in.Message), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add_prompt", Description: "Adds a prompt named by the message (tests prompts/list_changed)"},
		func(ctx context.Context, req *mcp.CallToolRequest, in EchoIn) (*mcp.CallToolResult, any, error) {
			s.AddPrompt(&mcp.Prompt{Name: in.Message, Description: "added at run time"},
				func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
					return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "added prompt"}}}}, nil
				})
			return text("added " + in.Message), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "meta", Description: "Returns the request's _meta as JSON (tests trace propagation)"},
		func(ctx context.Context, req *mcp.CallToolRequest, in Empty) (*mcp.CallToolResult, any, error) {
			b, err := json.Marshal(req.Params.Meta)
			if err != nil {
				return nil, nil, err
			}
			return text(string(b)), nil, nil
		})
	addClientRequestTools(s)
	s.AddResource(&mcp.Resource{URI: "test://greeting", Name: "greeting", MIMEType: "text/plain"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			// TESTMCP_READ_MS makes each read take that long (a slow
			// server's requests other than tool calls).
			if ms, err := strconv.Atoi(os.Getenv("TESTMCP_READ_MS")); err == nil && ms > 0 {
				select {
				case <-time.After(time.Duration(ms) * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "hello from " + name}}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "greet", Description: "Greets someone", Arguments: []*mcp.PromptArgument{{Name: "who", Required: true}}},
		func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Hello, " + req.Params.Arguments["who"]}}}}, nil
		})
	return s
}
