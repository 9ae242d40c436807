package e2e

// This file is the proof that an agent needs no mcpbus code: the test
// functions below talk to the bus with nothing but nats.go and encoding/json.
// (everythingURL, in helpers_test.go, only starts the system under test.)

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestPlainNATSCall is the requirement: a plain NATS request on
// mcp.v1.call.<server>.<tool> with the arguments as the body returns the
// MCP CallToolResult; an unknown server answers "no responders" at once.
func TestPlainNATSCall(t *testing.T) {
	t.Parallel()
	url := everythingURL(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	msg, err := nc.Request("mcp.v1.call.everything.echo", []byte(`{"message":"hi"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("echo answered an error %s: %s", code, msg.Data)
	}
	var result struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(msg.Data, &result); err != nil {
		t.Fatalf("reply is not JSON: %v: %s", err, msg.Data)
	}
	if len(result.Content) == 0 || result.Content[0].Type != "text" || result.Content[0].Text != "Echo: hi" || result.IsError {
		t.Fatalf("reply %s, want content[0].text \"Echo: hi\"", msg.Data)
	}

	start := time.Now()
	_, err = nc.Request("mcp.v1.call.nosuch.echo", []byte(`{"message":"hi"}`), 10*time.Second)
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("request to an unknown server: %v, want nats.ErrNoResponders", err)
	}
	if d := time.Since(start); d >= time.Second {
		t.Fatalf("no responders took %s, want an answer at once (< 1s)", d)
	}
}

// TestPlainNATSProtocol checks, with plain NATS only, every part of the
// protocol docs/agents.md teaches: tools.list, error headers and body,
// progress to an inbox, Mcp-Timeout-Ms and cancellation.
func TestPlainNATSProtocol(t *testing.T) {
	t.Parallel()
	url := everythingURL(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	type apiError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	}
	// wantError asserts an error reply: micro headers plus the JSON error body.
	wantError := func(msg *nats.Msg, status, code string) apiError {
		t.Helper()
		if got := msg.Header.Get("Nats-Service-Error-Code"); got != status {
			t.Fatalf("Nats-Service-Error-Code %q, want %q (body %s)", got, status, msg.Data)
		}
		var e apiError
		if err := json.Unmarshal(msg.Data, &e); err != nil {
			t.Fatalf("error body is not JSON: %v: %s", err, msg.Data)
		}
		if e.Code != code || e.Message == "" || msg.Header.Get("Nats-Service-Error") != e.Message {
			t.Fatalf("error %+v (header %q), want code %s with the message in Nats-Service-Error", e, msg.Header.Get("Nats-Service-Error"), code)
		}
		return e
	}

	t.Run("tools.list", func(t *testing.T) {
		msg, err := nc.Request("mcp.v1.tools.list", []byte(`{"server":"everything"}`), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Tools []struct {
				Name        string          `json:"name"`
				Server      string          `json:"server"`
				Tool        string          `json:"tool"`
				Subject     string          `json:"subject"`
				InputSchema json.RawMessage `json:"inputSchema"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(msg.Data, &list); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, tool := range list.Tools {
			if tool.Name == "everything__echo" {
				found = tool.Subject == "mcp.v1.call.everything.echo" && tool.Tool == "echo" && len(tool.InputSchema) > 0
			}
		}
		if !found {
			t.Fatalf("tools.list has no everything__echo on mcp.v1.call.everything.echo: %s", msg.Data)
		}
	})

	t.Run("error headers", func(t *testing.T) {
		msg, err := nc.Request("mcp.v1.call.everything.echo", []byte(`[1]`), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if e := wantError(msg, "400", "VALIDATION_ERROR"); e.Field != "arguments" {
			t.Errorf("validation error names field %q, want arguments", e.Field)
		}
		msg, err = nc.Request("mcp.v1.call.everything.no-such-tool", []byte(`{}`), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wantError(msg, "404", "NOT_FOUND")
	})

	t.Run("progress", func(t *testing.T) {
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		req := nats.NewMsg("mcp.v1.call.everything.trigger-long-running-operation")
		req.Header.Set("Mcp-Request-Id", "plain-progress-1")
		req.Header.Set("Mcp-Progress-Subject", inbox)
		req.Data = []byte(`{"duration":0.6,"steps":3}`)
		reply, err := nc.RequestMsg(req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if reply.Header.Get("Nats-Service-Error-Code") != "" {
			t.Fatalf("call failed: %s", reply.Data)
		}
		n := 0
		for {
			m, err := sub.NextMsg(200 * time.Millisecond)
			if err != nil {
				break
			}
			var ev struct {
				RequestID string  `json:"request_id"`
				Progress  float64 `json:"progress"`
				Total     float64 `json:"total"`
			}
			if err := json.Unmarshal(m.Data, &ev); err != nil || ev.RequestID != "plain-progress-1" || ev.Total != 3 {
				t.Errorf("progress message %s, want request_id plain-progress-1 and total 3", m.Data)
			}
			n++
		}
		t.Logf("%d progress messages of 3", n)
		if n < 2 {
			t.Fatalf("got %d progress messages on the inbox, want at least 2", n)
		}
	})

	t.Run("Mcp-Timeout-Ms", func(t *testing.T) {
		req := nats.NewMsg("mcp.v1.call.everything.trigger-long-running-operation")
		req.Header.Set("Mcp-Timeout-Ms", "300")
		req.Data = []byte(`{"duration":10,"steps":2}`)
		start := time.Now()
		reply, err := nc.RequestMsg(req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if e := wantError(reply, "504", "NETWORK_ERROR"); !strings.Contains(e.Message, "timed out") {
			t.Errorf("timeout error says %q, want it to say timed out", e.Message)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("the runner answered after %s; it should give up after the caller's 300ms", d)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		// Wait for the first progress message, so the call is surely running
		// at the server when the cancellation arrives.
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		req := nats.NewMsg("mcp.v1.call.everything.trigger-long-running-operation")
		req.Header.Set("Mcp-Request-Id", "plain-cancel-1")
		req.Header.Set("Mcp-Progress-Subject", inbox)
		req.Data = []byte(`{"duration":20,"steps":100}`)
		type result struct {
			msg *nats.Msg
			err error
		}
		done := make(chan result, 1)
		start := time.Now()
		go func() {
			m, err := nc.RequestMsg(req, 30*time.Second)
			done <- result{m, err}
		}()
		if _, err := sub.NextMsg(10 * time.Second); err != nil {
			t.Fatalf("no progress before cancelling: %v", err)
		}
		if err := nc.Publish("mcp.v1.cancel.everything", []byte(`{"request_id":"plain-cancel-1"}`)); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatal(r.err)
			}
			if e := wantError(r.msg, "504", "NETWORK_ERROR"); !strings.Contains(e.Message, "cancelled") {
				t.Errorf("cancelled call's error says %q, want it to say cancelled", e.Message)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("cancelled call answered after %s", d)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the cancelled call did not answer within 10s")
		}
	})
}
