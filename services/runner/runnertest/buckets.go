package runnertest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/configstore"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Buckets gives tests the shared KV buckets: put and delete configs, read
// and wait for statuses. Env and ClusterEnv both embed it.
type Buckets struct {
	Store  configstore.Store
	Assets *bus.Assets
}

// Put stores a config (validated, as the config service would).
func (e Buckets) Put(t testing.TB, cfg model.McpConfig) model.McpConfig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	saved, err := e.Store.Upsert(ctx, cfg)
	if err != nil {
		t.Fatalf("put config %s: %v", cfg.Name, err)
	}
	return saved
}

// Delete removes a config.
func (e Buckets) Delete(t testing.TB, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Assets.Configs.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// Status reads a server's status from KV (zero Status when absent or while
// JetStream does not answer).
func (e Buckets) Status(slug string) model.Status {
	var st model.Status
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	entry, err := e.Assets.Status.Get(ctx, slug)
	if err == nil {
		_ = json.Unmarshal(entry.Value(), &st)
	}
	return st
}

// WaitState waits until the server reaches state, failing the test after timeout.
func (e Buckets) WaitState(t testing.TB, slug, state string, timeout time.Duration) model.Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := e.Status(slug)
		if st.State == state {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("server %s: state %q (runner %q, %s %s), want %q after %s", slug, st.State, st.Runner, st.Code, st.Message, state, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
