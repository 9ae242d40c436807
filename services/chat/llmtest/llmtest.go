// Package llmtest is a local model server for tests: an httptest server that
// speaks the OpenAI Chat Completions API (POST /v1/chat/completions) and the
// Anthropic Messages API (POST /v1/messages), streaming (SSE) and not, with
// replies scripted in advance. It records every request it receives so a test
// can assert what the model was sent: messages, tools offered, tool results.
//
// The wire formats follow the recorded replies and types of the official SDKs
// (openai-go/v3, anthropic-sdk-go): chunks carry tool call arguments split over
// several deltas, usage comes in the last chunk when stream_options.include_usage
// is set (OpenAI) or in message_start/message_delta (Anthropic).
//
//	srv := llmtest.Start(t, "sk-test")
//	srv.Enqueue(llmtest.ToolCalls(llmtest.Call("echo", `{"text":"hi"}`)), llmtest.Text("done"))
//	// OpenAI base URL: srv.OpenAIBaseURL(); Anthropic base URL: srv.URL
package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// ToolCall is one tool call the scripted model makes.
type ToolCall struct {
	ID        string // generated (call_N / toolu_N) when empty
	Name      string
	Arguments string // raw JSON text, sent as is (may be deliberately invalid)
}

// Usage is the token usage a reply reports.
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// DefaultUsage is reported by replies that set no Usage.
var DefaultUsage = Usage{InputTokens: 11, OutputTokens: 7}

// Reply is one scripted model reply, consumed by one request.
type Reply struct {
	// Text is the assistant text, streamed in word-sized deltas.
	Text string
	// ToolCalls are made after Text, in order (parallel when several).
	ToolCalls []ToolCall
	// Status, when not 0 or 200, answers with that HTTP error status and the
	// provider's error body instead of a completion.
	Status int
	// Message is the error message sent with Status (a default when "").
	Message string
	// RetryAfter is the Retry-After header sent with Status (e.g. "1").
	RetryAfter string
	// Code, sent with Status, is the OpenAI error's type and code (e.g.
	// "insufficient_quota", OpenAI's 429 of a spent quota); a default for
	// the status when "".
	Code string
	// Malformed answers 200 with a body that is not the provider's format:
	// a non-JSON body, or a stream whose second event is broken JSON.
	Malformed bool
	// StreamError, on a streamed reply, sends an error event of this type
	// (e.g. "overloaded_error", "rate_limit_error", "server_error") right
	// after the stream opened, before any content: Anthropic's `event: error`
	// or OpenAI's `data: {"error":{…}}`. The HTTP status stays 200.
	StreamError string
	// Delay is slept before each streamed event (a slow stream), and before
	// a non-streamed body.
	Delay time.Duration
	// Usage overrides DefaultUsage.
	Usage *Usage
	// Truncated ends the reply as cut by the provider's output token limit
	// (OpenAI's finish_reason "length", Anthropic's stop_reason "max_tokens").
	Truncated bool
	// Cut ends a streamed reply's body cleanly right after its text, as a
	// server or proxy that stops mid-answer: no tool calls, no
	// finish_reason, usage or [DONE] (OpenAI), no message_delta or
	// message_stop (Anthropic).
	Cut bool
}

// CutShort is a streamed reply whose body ends after the text, before the
// answer's end.
func CutShort(text string) Reply { return Reply{Text: text, Cut: true} }

// Text is a plain answer.
func Text(s string) Reply { return Reply{Text: s} }

// Call is a ToolCall with a generated ID.
func Call(name, args string) ToolCall { return ToolCall{Name: name, Arguments: args} }

// ToolCalls is a reply that calls one or several tools at once.
func ToolCalls(calls ...ToolCall) Reply { return Reply{ToolCalls: calls} }

// Error is an HTTP error reply (500, 503, 400…).
func Error(status int) Reply { return Reply{Status: status} }

// RateLimited is a 429, with a Retry-After header when retryAfter is not "".
func RateLimited(retryAfter string) Reply {
	return Reply{Status: http.StatusTooManyRequests, RetryAfter: retryAfter}
}

// QuotaSpent is OpenAI's 429 of an account whose quota is spent.
func QuotaSpent() Reply {
	return Reply{Status: http.StatusTooManyRequests, Code: "insufficient_quota",
		Message: "You exceeded your current quota, please check your plan and billing details."}
}

// Malformed is a 200 whose body the client cannot decode.
func Malformed() Reply { return Reply{Malformed: true} }

// Slow streams r with delay before each event.
func Slow(r Reply, delay time.Duration) Reply { r.Delay = delay; return r }

// TaggedToolCall is a tool call written as text in the content the way
// Hermes/Qwen-style local models do: <tool_call>{"name":…,"arguments":…}</tool_call>.
func TaggedToolCall(name, args string) Reply {
	return Text("<tool_call>\n" + textCall(name, args) + "\n</tool_call>")
}

// BareToolCall is a tool call written as a bare JSON object in the content.
func BareToolCall(name, args string) Reply { return Text(textCall(name, args)) }

// FencedToolCall is a tool call written as a ```json fenced block.
func FencedToolCall(name, args string) Reply {
	return Text("I will call the tool.\n```json\n" + textCall(name, args) + "\n```")
}

func textCall(name, args string) string {
	n, _ := json.Marshal(name)
	return `{"name": ` + string(n) + `, "arguments": ` + args + `}`
}

// Request is one request the server received.
type Request struct {
	API    string // "openai" or "anthropic"
	Path   string
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a generic value (map[string]any).
func (r Request) JSON() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(r.Body, &m)
	return m
}

// Server is the scripted model server.
type Server struct {
	// URL is the server's base URL: the Anthropic SDK's base URL as is.
	URL string

	srv    *httptest.Server
	apiKey string

	mu       sync.Mutex
	queue    []Reply
	fallback *Reply
	requests []Request
	ids      int
}

// Start starts a server closed at the end of the test. With apiKey != "",
// requests must carry it (Authorization: Bearer for OpenAI, x-api-key for
// Anthropic) or get a 401.
func Start(t testing.TB, apiKey string) *Server {
	s := New(apiKey)
	t.Cleanup(s.Close)
	return s
}

// New starts a server; Close it.
func New(apiKey string) *Server {
	s := &Server{apiKey: apiKey}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.openai)
	mux.HandleFunc("POST /v1/messages", s.anthropic)
	s.srv = httptest.NewServer(mux)
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// OpenAIBaseURL is the base URL for OpenAI-compatible clients (".../v1/").
func (s *Server) OpenAIBaseURL() string { return s.URL + "/v1/" }

// Enqueue appends scripted replies; each request consumes the next one.
func (s *Server) Enqueue(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, replies...)
}

// Always sets the reply given once the queue is empty (e.g. a 429 forever).
// Without it an empty queue answers 500 "llmtest: no scripted reply".
func (s *Server) Always(r Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fallback = &r
}

// Requests returns the requests received so far, in order (rejected ones too).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Attempts is the number of requests received so far.
func (s *Server) Attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// Last is the last request received (zero Request when none).
func (s *Server) Last() Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		return Request{}
	}
	return s.requests[len(s.requests)-1]
}

// Pending is the number of scripted replies not consumed yet.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// receive records the request and, when authorized, pops the next reply.
func (s *Server) receive(api string, r *http.Request, authorized func(string) bool) (body []byte, reply Reply, status int) {
	body, err := readAll(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{API: api, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	switch {
	case err != nil:
		return body, reply, http.StatusBadRequest
	case s.apiKey != "" && !authorized(s.apiKey):
		return body, reply, http.StatusUnauthorized
	case len(s.queue) > 0:
		reply = s.queue[0]
		s.queue = s.queue[1:]
	case s.fallback != nil:
		reply = *s.fallback
	default:
		return body, Reply{Status: http.StatusInternalServerError, Message: "llmtest: no scripted reply"}, 0
	}
	return body, reply, 0
}

func (s *Server) nextID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids++
	return fmt.Sprintf("%s%d", prefix, s.ids)
}

func (r Reply) message(def string) string {
	if r.Message != "" {
		return r.Message
	}
	return def
}

func (r Reply) usage() Usage {
	if r.Usage != nil {
		return *r.Usage
	}
	return DefaultUsage
}

// words splits text into deltas that concatenate back to it.
func words(text string) []string {
	if text == "" {
		return nil
	}
	return strings.SplitAfter(text, " ")
}

// split cuts s into up to n pieces that concatenate back to it.
func split(s string, n int) []string {
	if len(s) < n {
		return []string{s}
	}
	var out []string
	size := (len(s) + n - 1) / n
	for len(s) > size {
		out = append(out, s[:size])
		s = s[size:]
	}
	return append(out, s)
}
