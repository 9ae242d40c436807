package stack_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// TestUpOnASmallDisk: `mcpbus up` whose NATS has less storage than the
// streams ask for (5 GiB; nats-server offers 75% of the free disk, so this
// is a disk with under 7 GB free) comes up with smaller streams that
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
