package main_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
)

// TestBinary builds the service, runs it against a NATS server over TCP with
// the file backend, and talks to it through the client library.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "mcpbus-credential")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ns, err := embednats.Start(embednats.Options{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Stop()
	dataDir := filepath.Join(dir, "data")
	var stderr strings.Builder
	cmd := exec.Command(bin, "--nats", ns.ClientURL(), "--insecure-bus", "--prefix", "test.v1", "--cred-backend", "file", "--data-dir", dataDir)
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT=")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }() // a no-op once it has exited

	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := credclient.New(nc, "test.v1")
	id := uuid.NewString()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The process needs a moment to subscribe: retry until it answers.
	var desc model.CredDescription
	for {
		desc, err = c.Set(ctx, model.CredSetRequest{ServerID: id, Credentials: model.Credentials{Env: map[string]string{"TOKEN": "binary-secret-1"}}})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || !desc.Has("TOKEN") || desc.Backend != "file" {
		t.Fatalf("set: %+v, %v\n%s", desc, err, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dataDir, "secrets", "server", id+".cred")); err != nil {
		t.Fatalf("record file: %v", err)
	}
	// Resolve answers only the runner that leases the server.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	assets, err := bus.EnsureAssets(ctx, js, bus.NewSubjects("test.v1"), bus.AssetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(model.McpConfig{ID: id, Name: "bin", Slug: "bin"})
	lease, _ := json.Marshal(map[string]any{"runner": "r1", "server": "bin", "replica": 0})
	if _, err := assets.Configs.Put(ctx, id, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := assets.Owners.Put(ctx, "server.bin.0", lease); err != nil {
		t.Fatal(err)
	}
	other, err := credclient.NewResolver(nc, "test.v1", credclient.AsRunner("r2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Resolve(ctx, id); apierr.Of(err) != apierr.Unauthorized {
		t.Fatalf("resolve by a runner without the lease: %v", err)
	}
	res, err := credclient.NewResolver(nc, "test.v1", credclient.AsRunner("r1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := res.Resolve(ctx, id); err != nil || got.Env["TOKEN"] != "binary-secret-1" {
		t.Fatalf("resolve: %+v, %v", got, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit within 10s of SIGTERM")
	}
	if strings.Contains(stderr.String(), "binary-secret-1") {
		t.Fatal("the log contains the secret")
	}
	if !strings.Contains(stderr.String(), `"verb":"resolve"`) {
		t.Fatalf("no request log lines:\n%s", stderr.String())
	}
}
