package provider_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/services/chat/provider"
)

// A reply larger than a step may hold is stopped, not taken whole (its log
// entry would not fit the bus, and it is all in memory).
func TestReplyTooLarge(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Enqueue(llmtest.Text(strings.Repeat("x", provider.MaxReplyBytes+1)))
		_, err := m.Step(context.Background(), hello, nil)
		if e := apierr.From(err); err == nil || e.Code != apierr.Internal || !strings.Contains(e.Message, "more than") {
			t.Fatalf("err %v, want INTERNAL_ERROR saying the reply is too large", err)
		}
	})
}

// A reply of more tool calls than a step takes is stopped.
func TestTooManyToolCalls(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		calls := make([]llmtest.ToolCall, provider.MaxToolCalls+1)
		for i := range calls {
			calls[i] = llmtest.Call("files__read", fmt.Sprintf(`{"n":%d}`, i))
		}
		srv.Enqueue(llmtest.ToolCalls(calls...))
		step, err := m.Step(context.Background(), hello, nil)
		if e := apierr.From(err); err == nil || e.Code != apierr.Internal || !strings.Contains(e.Message, "tool calls") {
			t.Fatalf("err %v (%d calls), want INTERNAL_ERROR about too many tool calls", err, len(step.ToolCalls))
		}
	})
}

// A body that never ends a line (nor itself) is cut at MaxResponseBytes,
// long before the context's end.
func TestEndlessLineCut(t *testing.T) {
	var wrote atomic.Int64
	over := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: "))
		chunk := []byte(strings.Repeat("a", 64<<10))
		for wrote.Load() < 16<<20 {
			n, err := w.Write(chunk)
			wrote.Add(int64(n))
			if err != nil {
				return
			}
		}
		select { // and then nothing, the connection held open
		case <-r.Context().Done():
		case <-over:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(over) }) // before srv.Close
	for _, name := range []string{provider.OpenAI, provider.Anthropic} {
		t.Run(name, func(t *testing.T) {
			base := srv.URL
			if name == provider.OpenAI {
				base += "/v1"
			}
			m, err := provider.New(provider.Config{Provider: name, Model: "m", BaseURL: base, APIKey: key, MaxResponseBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = m.Step(ctx, hello, nil)
			if err == nil || ctx.Err() != nil || !strings.Contains(apierr.From(err).Message, "larger than") {
				t.Fatalf("err %v (context: %v), want the response cut at its limit", err, ctx.Err())
			}
		})
	}
}

// A base URL that redirects to another origin is not followed: Go would
// send Anthropic's x-api-key along, and reach whatever address it names.
func TestRedirectToAnotherOriginRefused(t *testing.T) {
	var leaked atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(r.Header.Get("X-Api-Key") + r.Header.Get("Authorization"))
		http.Error(w, "internal service", http.StatusTeapot)
	}))
	t.Cleanup(other.Close)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)
	for _, name := range []string{provider.OpenAI, provider.Anthropic} {
		t.Run(name, func(t *testing.T) {
			base := redirector.URL
			if name == provider.OpenAI {
				base += "/v1"
			}
			m, err := provider.New(provider.Config{Provider: name, Model: "m", BaseURL: base, APIKey: key})
			if err != nil {
				t.Fatal(err)
			}
			_, err = m.Step(context.Background(), hello, nil)
			if err == nil || !strings.Contains(err.Error(), "another origin") {
				t.Fatalf("err %v, want the redirect refused", err)
			}
			if v, _ := leaked.Load().(string); v != "" {
				t.Fatalf("the other origin got the key %q", v)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatal(err)
			}
		})
	}
}

// An absurd Retry-After is the longest wait, not a negative one retried at
// once (a float past 2^63 ns converts to a negative Duration).
func TestHugeRetryAfterWaitsTheMost(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Enqueue(llmtest.RateLimited("1e300"), llmtest.Text("too soon"))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := m.Step(ctx, hello, nil)
		if e := apierr.From(err); err == nil || e.Code != apierr.RateLimited || srv.Attempts() != 1 {
			t.Fatalf("err %v after %d attempts: want RATE_LIMITED at once, the wait not fitting the context", err, srv.Attempts())
		}
	})
}

// A provider's error message reaches the turn's end, its error event, the
// conversation's log and the span: a provider writing megabytes of it has
// it cut, as the body of an error it does not word as JSON is.
func TestLongErrorMessageCut(t *testing.T) {
	backends(t, func(t *testing.T, srv *llmtest.Server, m provider.Model, name string) {
		srv.Enqueue(llmtest.Reply{Status: 400, Message: "bad request: " + strings.Repeat("m", 4<<20)})
		_, err := m.Step(context.Background(), hello, nil)
		e := apierr.From(err)
		if len(e.Message) > 2<<10 || !strings.Contains(e.Message, "bad request: mmm") {
			t.Fatalf("a message of %d bytes: %.200s…", len(e.Message), e.Message)
		}
	})
}
