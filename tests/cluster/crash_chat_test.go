package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestChatProfileWriteAfterNodeCrash: the node leading the chat profile
// bucket is SIGKILLed; a profile created and one edited right after succeed
// within the CLI's wait (the bucket's writes go through bus.RetryKV).
func TestChatProfileWriteAfterNodeCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nats-server processes")
	}
	const victim = 2 // n3
	c := startProcCluster(t, 3)
	nc, err := nats.Connect(c.urlsBut(victim), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	waitReplicated(t, js, 30*time.Second)

	dir := t.TempDir()
	svc := testkit.StartProc(t, testkit.ProcOptions{Name: "chat", Bin: mcpbusBin, Dir: dir, Args: []string{
		"serve", "chat", "--nats", c.urlsBut(victim), "--insecure-bus", "--replicas", "3", "--data-dir", dir, "--log-level", "debug"}})
	svc.WaitLog(t, `"msg":"service ready"`, 60*time.Second)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chat service log tail:\n%s", testkit.TailLines(svc.Output(), 40))
		}
	})
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		return pingServices(nc)["mcpbus-chat"] == 1, "the chat service does not answer $SRV.PING"
	})
	cl := client.New(nc, client.Options{Timeout: cliWait})
	ctx, cancel := context.WithTimeout(context.Background(), cliWait)
	first, err := cl.PutProfile(ctx, profile("before"), client.ProfileKey{})
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	name := fmt.Sprintf("n%d", victim+1)
	moveLeader(t, nc, js, "KV_mcp_chat_profiles", name)
	t.Logf("%s leads KV_mcp_chat_profiles; SIGKILL", name)
	c.nodes[victim].Kill(t)

	start := time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), cliWait)
	defer cancel()
	if _, err := cl.PutProfile(ctx, profile("after"), client.ProfileKey{}); err != nil {
		t.Fatalf("profile create %s after the crash: %v", since(start), err)
	}
	t.Logf("profile create answered %s after the SIGKILL", since(start))
	edit := first
	edit.SystemPrompt = "edited after the crash"
	edited, err := cl.PutProfile(ctx, edit, client.ProfileKey{})
	if err != nil {
		t.Fatalf("profile edit %s after the crash: %v", since(start), err)
	}
	if edited.Revision <= first.Revision || edited.SystemPrompt != edit.SystemPrompt {
		t.Fatalf("edit stored %+v, want a new revision with the new prompt", edited)
	}
	got, err := cl.GetProfile(ctx, "after")
	if err != nil || got.Model != "m" {
		t.Fatalf("get after = %+v, %v; want the created profile", got, err)
	}
}

// profile is a profile named name that no turn will use.
func profile(name string) model.Profile {
	return model.Profile{Name: name, Provider: "openai", Model: "m", BaseURL: "http://127.0.0.1:1/v1"}
}
