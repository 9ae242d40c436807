package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

var testServer string

func TestMain(m *testing.M) {
	testkit.Main(m, &testServer)
}

// TestUpOnASmallDisk: `mcpbus up` whose NATS has less storage than the
// streams and the tasks bucket ask for (6 GiB; nats-server offers 75% of
// the free disk, so this is a disk with under 8 GB free) comes up with smaller streams that
// together fit in it, instead of failing with "insufficient storage
// resources available".
func TestUpOnASmallDisk(t *testing.T) {
	const store = 600 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st, err := stack.Start(ctx, stack.Options{DataDir: t.TempDir(), InProcessOnly: true, NATSMaxStore: store, InsecureBus: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("mcpbus up with %d MiB of NATS storage: %v", store>>20, err)
	}
	defer st.Close()
	sum := streamBounds(ctx, t, st)
	if sum == 0 || sum > store {
		t.Errorf("the streams reserve %d bytes of the server's %d", sum, store)
	}
}

// TestUpOnAFullDisk: with less NATS storage than the smallest stream worth
// making (64 MiB), `mcpbus up` fails at once saying what to do, not after
// a minute of "waiting for NATS JetStream".
func TestUpOnAFullDisk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	began := time.Now()
	st, err := stack.Start(ctx, stack.Options{DataDir: t.TempDir(), InProcessOnly: true, NATSMaxStore: 48 << 20,
		Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		st.Close()
		t.Fatal("mcpbus up with 48 MiB of NATS storage came up")
	}
	if took := time.Since(began); took > 30*time.Second {
		t.Errorf("the failure took %s", took)
	}
	for _, want := range []string{"no room", "not even 64 MiB fits", "--nats-max-store"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
}

// TestUpWithAFewGiB: `mcpbus up` whose NATS has 1 or 3 GiB of storage
// (a disk with about 1.5 or 4 GB free) comes up, every service with it,
// and a tool call goes through the runner. The streams ask 6 GiB by
// default; made one at a time, the first ones took all the server had and
// start-up stopped (in about 9 s, on "no room"). Now mcpbus up sizes them
// together from the storage its server runs with, leaving a third for the
// buckets, and says so once.
func TestUpWithAFewGiB(t *testing.T) {
	for _, store := range []int64{1 << 30, 3 << 30} {
		t.Run(fmt.Sprintf("%dGiB", store>>30), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			logs := &testkit.LogBuffer{}
			st, err := stack.Start(ctx, stack.Options{DataDir: t.TempDir(), InProcessOnly: true, NATSMaxStore: store, InsecureBus: true,
				Gateway: &gateway.Options{Addr: "127.0.0.1:0"},
				Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
			if err != nil {
				t.Fatalf("mcpbus up with %d GiB of NATS storage: %v\nlog:\n%s", store>>30, err, logs.Tail(4000))
			}
			defer st.Close()
			if st.Gateway == nil || len(st.Services) != 6 {
				t.Fatalf("services up: %d (gateway %v), want all 6", len(st.Services), st.Gateway != nil)
			}
			sum := streamBounds(ctx, t, st)
			if sum == 0 || sum > store*2/3 {
				t.Errorf("the streams reserve %d MiB of the server's %d MiB: want at most two thirds", sum>>20, store>>20)
			}
			// The tasks bucket is bounded (callers' results could fill the
			// server otherwise), within the two thirds.
			js, err := jetstream.New(st.Conn)
			if err != nil {
				t.Fatal(err)
			}
			if tasks, err := js.Stream(ctx, "KV_mcp_tasks"); err != nil || tasks.CachedInfo().Config.MaxBytes <= 0 {
				t.Errorf("the tasks bucket: %v, unbounded; want it bounded", err)
			}
			if n := strings.Count(logs.String(), "too little for the streams' default bounds"); n != 1 {
				t.Errorf("the sizes chosen were logged %d times, want once:\n%s", n, logs.Tail(4000))
			}

			saved, err := st.Client.CreateConfig(ctx, model.McpConfig{Name: "Echo",
				Package:   model.Package{Type: model.PackageBinary, Identifier: testServer},
				Transport: model.Transport{Type: model.TransportStdio}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Client.SetEnabled(ctx, saved.Slug, true); err != nil {
				t.Fatalf("enable: %v", err)
			}
			raw, err := st.Client.Call(ctx, saved.Slug, "echo", json.RawMessage(`{"message":"room enough"}`), nil)
			if err != nil {
				t.Fatalf("a call through the runner: %v", err)
			}
			if !strings.Contains(string(raw), "room enough") {
				t.Errorf("the call answered %s", raw)
			}
		})
	}
}

// streamBounds is the sum of the stack's streams' MaxBytes, each logged.
func streamBounds(ctx context.Context, t *testing.T, st *stack.Stack) int64 {
	t.Helper()
	// (An insecure bus: the operator's identity may not list streams.)
	js, err := jetstream.New(st.Conn)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	names := js.ListStreams(ctx)
	for info := range names.Info() {
		if b := info.Config.MaxBytes; b > 0 {
			t.Logf("%s: %d MiB", info.Config.Name, b>>20)
			sum += b
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}
