package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestPlainNATSServerRequests: a published npm server (protocol 2025-era,
// which sends elicitation/create and sampling/createMessage as requests of
// its own) asks during a call, and a plain NATS caller that named its inbox
// in Mcp-Client-Subject answers; the answers reach the tool's result.
func TestPlainNATSServerRequests(t *testing.T) {
	t.Parallel()
	url := everythingURL(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	inbox := nc.NewInbox()
	var methods []string
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) {
		var req struct {
			Server string          `json:"server"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("client request is not JSON: %v: %s", err, m.Data)
			return
		}
		methods = append(methods, req.Server+" "+req.Method)
		switch req.Method {
		case "elicitation/create":
			_ = m.Respond([]byte(`{"action":"accept","content":{"name":"Ada Lovelace","check":true}}`))
		case "sampling/createMessage":
			_ = m.Respond([]byte(`{"role":"assistant","model":"plain-nats-model","content":{"type":"text","text":"forty-two"}}`))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	callWith := func(tool, args string) string {
		t.Helper()
		msg := nats.NewMsg("mcp.v1.call.everything." + tool)
		msg.Data = []byte(args)
		msg.Header.Set("Mcp-Client-Subject", inbox)
		reply, err := nc.RequestMsg(msg, 20*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
			t.Fatalf("%s answered an error %s: %s", tool, code, reply.Data)
		}
		return string(reply.Data)
	}
	if got := callWith("trigger-elicitation-request", `{}`); !strings.Contains(got, "Ada Lovelace") {
		t.Fatalf("elicitation answer missing from the result: %s", got)
	}
	if got := callWith("trigger-sampling-request", `{"prompt":"6 times 7?","maxTokens":20}`); !strings.Contains(got, "forty-two") || !strings.Contains(got, "plain-nats-model") {
		t.Fatalf("sampling answer missing from the result: %s", got)
	}
	if strings.Join(methods, ",") != "everything elicitation/create,everything sampling/createMessage" {
		t.Fatalf("client requests seen: %v", methods)
	}

	// Without a client subject the server's request fails, and the tool says so.
	reply, err := nc.Request("mcp.v1.call.everything.trigger-elicitation-request", []byte(`{}`), 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(reply.Data), "no caller to relay elicitation/create") {
		t.Fatalf("elicitation without a client subject: %s", reply.Data)
	}
}
