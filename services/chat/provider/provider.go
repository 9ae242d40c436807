// Package provider is the chat loop's view of a language model: one Step of a
// conversation (system prompt, messages, tools offered) streamed back as text
// deltas and ending in the assistant's text, its tool calls, the stop reason
// and the token usage. Two implementations: any OpenAI-compatible Chat
// Completions API (OpenAI, Ollama, vLLM, LM Studio, OpenRouter) through
// github.com/sashabaranov/go-openai (a fraction of the official openai-go's
// size in the binary), and the Anthropic Messages API through anthropic-sdk-go.
//
// The SDKs' own retries are off (go-openai has none): a 429 (and Anthropic's 529 overload) is retried
// here with backoff 1, 2, 4 … 60 s honouring Retry-After, bounded by the
// context and Config.MaxRetries, and then reported as RATE_LIMITED "Rate
// limited. Try again in X seconds.". OpenAI's 429 insufficient_quota (a
// spent quota) is not retried: RATE_LIMITED with field quota. Errors are
// libs/apierr errors.
package provider

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Providers accepted in Config.Provider.
const (
	OpenAI    = "openai"
	Anthropic = "anthropic"
)

// Model is a language model the loop can take one step with.
type Model interface {
	// Step sends the conversation and streams the reply: onDelta (may be nil)
	// receives text deltas in order as they arrive. The Step returned holds
	// the assembled reply. Tool calls are in Step.ToolCalls whatever the stop
	// reason says (some servers answer "stop" with tool calls).
	Step(ctx context.Context, req Request, onDelta func(Delta)) (Step, error)
}

// Role of a Message.
type Role string

// Roles.
const (
	User      Role = "user"
	Assistant Role = "assistant"
	// Tool is a message carrying tool results (ToolResults).
	Tool Role = "tool"
)

// Message is one message of the conversation.
type Message struct {
	Role Role
	// Text is the user's text or the assistant's text.
	Text string
	// ToolCalls are the calls an assistant message made.
	ToolCalls []ToolCall
	// ToolResults are the results a Tool message carries, keyed by call id.
	ToolResults []ToolResult
}

// ToolCall is a tool call the model asked for.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is the JSON text the model wrote, verbatim ("{}" when it
	// wrote none). It may be invalid JSON: the loop must check.
	Arguments string
}

// ToolResult is the result of a tool call, sent back to the model.
type ToolResult struct {
	CallID  string
	Content string
	IsError bool
}

// ToolSpec is a tool offered to the model.
type ToolSpec struct {
	Name        string
	Description string
	// InputSchema is the JSON Schema of the arguments (an object schema);
	// empty means {"type":"object"}.
	InputSchema []byte
}

// Request is one step's input.
type Request struct {
	System   string
	Messages []Message
	Tools    []ToolSpec
	// MaxTokens bounds the output; 0 leaves the provider's default (4096
	// for Anthropic, which requires one).
	MaxTokens int
}

// Delta is a piece of the reply as it streams.
type Delta struct {
	Text string
}

// StopReason says why the model stopped.
type StopReason string

// Stop reasons, normalised across providers; others pass through as sent.
const (
	StopEndTurn   StopReason = model.ChatStopEndTurn
	StopToolUse   StopReason = model.ChatStopToolUse
	StopMaxTokens StopReason = model.ChatStopMaxTokens
	StopRefusal   StopReason = model.ChatStopRefusal
)

// Usage is the token usage of one step.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
}

// Step is the model's reply to one Request.
type Step struct {
	Text       string
	ToolCalls  []ToolCall
	StopReason StopReason
	Usage      Usage
}

// Config chooses and reaches a model.
type Config struct {
	Provider string // OpenAI or Anthropic
	Model    string
	// BaseURL overrides the provider's API URL (for OpenAI-compatible
	// servers, the URL ending in /v1, e.g. http://localhost:11434/v1).
	BaseURL string
	// APIKey is required unless BaseURL is set (local servers need none).
	APIKey string
	// HTTPClient defaults to a client without timeout (the ctx bounds it).
	// The model uses a copy that bounds response bodies and follows no
	// redirect to another origin (guarded).
	HTTPClient *http.Client
	// MaxRetries bounds the retries of a rate-limited request (default 8;
	// negative: none). The context bounds them too.
	MaxRetries int
	// MaxBackoff caps one wait (default 60 s).
	MaxBackoff time.Duration
	// MaxResponseBytes bounds the body of one response (default
	// DefaultMaxResponseBytes): past it the step fails.
	MaxResponseBytes int64
}

// New validates cfg and returns its Model. It makes no request.
func New(cfg Config) (Model, error) {
	cfg.Provider = strings.ToLower(strings.TrimSpace(cfg.Provider))
	if cfg.Model == "" {
		return nil, apierr.Invalid("model", "a model is required")
	}
	if cfg.APIKey == "" && cfg.BaseURL == "" {
		return nil, apierr.Invalid("api_key", "an API key is required for "+cfg.Provider+" (only a custom base URL, e.g. a local server, may go without)")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	cfg.HTTPClient = guarded(cfg.HTTPClient, cfg.MaxResponseBytes)
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 8
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 60 * time.Second
	}
	switch cfg.Provider {
	case OpenAI:
		return newOpenAI(cfg), nil
	case Anthropic:
		return newAnthropic(cfg), nil
	}
	return nil, apierr.Invalid("provider", `unknown provider "`+cfg.Provider+`": want "openai" or "anthropic"`)
}
