package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/mcpbus/mcpbus/libs/bus"
)

// Forged is what the tamperer answers: where the forged record is stored.
type Forged struct {
	StreamSeq uint64 `json:"stream_seq"`
	Chain     string `json:"chain"`
}

// tamperer serves POST / for the browser flows: each request appends to
// the config service's audit chain a record that links to the chain's last
// one but whose events are not what its signature covers (a record altered
// after it was signed), connecting as the config identity of the mcpbus up
// in dataDir, the only identity allowed to write that chain.
func tamperer(t *testing.T, natsURL, dataDir string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := forgeConfigRecord(r.Context(), natsURL, dataDir)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(f)
	}))
	t.Cleanup(func() { closeNow(srv) }) // run.mjs keeps its connection alive
	return srv
}

func forgeConfigRecord(ctx context.Context, natsURL, dataDir string) (Forged, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	seed, err := os.ReadFile(filepath.Join(dataDir, "nats", string(access.Config)+access.SeedExt))
	if err != nil {
		return Forged{}, err
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		return Forged{}, err
	}
	pub, _ := kp.PublicKey()
	nc, err := nats.Connect(natsURL, nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(access.Inbox(string(access.Config))))
	if err != nil {
		return Forged{}, err
	}
	defer nc.Close()
	chain := audit.ChainOf(string(access.Config), pub)
	subject := bus.NewSubjects("").Audit(chain)
	m, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+bus.StreamAudit+"."+subject, nil)
	if err != nil {
		return Forged{}, fmt.Errorf("the chain's head: %w", err)
	}
	var head audit.Record
	if err := json.Unmarshal(m.Data, &head); err != nil || head.Seq == 0 {
		return Forged{}, fmt.Errorf("the chain's head: %v (%s %s)", err, m.Header.Get("Status"), m.Data)
	}
	forged := head
	forged.Seq, forged.Prev = head.Seq+1, head.Hash
	forged.Events = []audit.Event{{Subject: bus.NewSubjects("").Event("config", "forged"), Event: json.RawMessage(`{"type":"deleted","server":"forged"}`)}}
	data, err := json.Marshal(forged)
	if err != nil {
		return Forged{}, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return Forged{}, err
	}
	ack, err := js.Publish(ctx, subject, data)
	if err != nil {
		return Forged{}, fmt.Errorf("appending the forged record: %w", err)
	}
	return Forged{StreamSeq: ack.Sequence, Chain: chain}, nil
}
