package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	engine "github.com/mcpbus/mcpbus/libs/approvals"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/libs/testkit"
	chatapprovals "github.com/mcpbus/mcpbus/services/chat/approvals"
)

// TestApprovalsCommands: `mcpbus approvals` lists a held call, approves it
// (as the operator), is told CONFLICT on a second answer, replaces the rules
// from a file, a bad one refused with the field named, and approves a chat
// call its profile's rules hold (the same records).
func TestApprovalsCommands(t *testing.T) {
	url, nc, svc := stubBus(t, "approvals-test", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := engine.Open(ctx, ctx, nc, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AddEndpoints(svc, "mcp.v1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutRules(ctx, model.ApprovalRules{Rules: []model.GatewayApprovalRule{{Tool: "fs__write", Decision: model.ApprovalAsk}}}); err != nil {
		t.Fatal(err)
	}
	h, err := st.Hold(ctx, engine.Call{Principal: "key:k1", Server: "fs", Tool: "fs__write", Arguments: json.RawMessage(`{"path":"/etc/motd"}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"--nats", url}, args...), strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := run("approvals", "list"); code != 0 || !strings.Contains(out, h.ID) || !strings.Contains(out, "fs__write") || !strings.Contains(out, "/etc/motd") {
		t.Fatalf("list: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := run("approvals", "approve", h.ID, "--reason", "looked"); code != 0 || !strings.Contains(out, "approved") {
		t.Fatalf("approve: %d %q %q", code, out, errOut)
	}
	if got, err := st.Get(ctx, h.ID); err != nil || got.Decision != model.HeldApproved || got.DecidedBy != "operator" || got.Reason != "looked" {
		t.Fatalf("after approve: %+v %v", got, err)
	}
	if code, _, errOut := run("approvals", "deny", h.ID); code != 1 || !strings.Contains(errOut, "CONFLICT") {
		t.Fatalf("second answer: %d %q", code, errOut)
	}
	file := filepath.Join(t.TempDir(), "rules.json")
	_ = os.WriteFile(file, []byte(`{"rules":[{"tool":"git__push","decision":"deny"}],"timeout_seconds":30}`), 0o600)
	if code, out, errOut := run("approvals", "rules", "--file", file); code != 0 || !strings.Contains(out, "git__push") {
		t.Fatalf("rules --file: %d %q %q", code, out, errOut)
	}
	if r := st.Rules(); len(r.Rules) != 1 || r.Rules[0].Tool != "git__push" || r.TimeoutSeconds != 30 {
		t.Fatalf("stored rules: %+v", r)
	}
	_ = os.WriteFile(file, []byte(`{"rules":[{"tool":"x","decision":"maybe"}]}`), 0o600)
	if code, _, errOut := run("approvals", "rules", "--file", file); code != 1 || !strings.Contains(errOut, "rules.0.decision") {
		t.Fatalf("bad rules: %d %q", code, errOut)
	}

	// A chat turn's call held by its profile's rules, for the turn's sender.
	chat, err := chatapprovals.Open(ctx, nc, chatapprovals.Options{})
	if err != nil {
		t.Fatal(err)
	}
	asked := make(chan string, 1)
	go func() {
		sender := principal.With(ctx, principal.Key("k2", false, model.ToolFilter{}))
		d, err := chat.Ask(sender, "conv1", model.ChatToolCall{CallID: "c1", Tool: "fs__write", Arguments: json.RawMessage(`{"path":"/chat"}`)}, model.Tool{}, nil)
		if err != nil {
			d = err.Error()
		}
		asked <- d
	}()
	var held model.HeldCall
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		list, _ := st.List(ctx, "operator", true)
		for _, c := range list {
			if strings.Contains(string(c.Arguments), "/chat") {
				held = c
				return true, ""
			}
		}
		return false, "the chat's call was never held in mcp_approvals"
	})
	if held.Principal != "key:k2" {
		t.Fatalf("held for %q, want the turn's sender", held.Principal)
	}
	if code, out, errOut := run("approvals", "approve", held.ID); code != 0 || !strings.Contains(out, "approved") {
		t.Fatalf("approve the chat's call: %d %q %q", code, out, errOut)
	}
	if d := <-asked; d != model.DecisionApprove {
		t.Fatalf("the chat's call after mcpbus approvals approve: %s", d)
	}
}
