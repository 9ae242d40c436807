package schema

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
)

// TestAuditShapes: the records the audit writer stores and the bundle an
// export writes match audit-record.json and audit-bundle.json; records
// changed by hand do not.
func TestAuditShapes(t *testing.T) {
	r := loadRegistry(t)
	srv, err := embednats.Start(embednats.Options{InProcessOnly: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, bus.AuditStream(bus.NewSubjects(""), time.Hour, 1<<20)); err != nil {
		t.Fatal(err)
	}
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	w, err := audit.NewWriter(nc, audit.WriterOptions{Role: "config", Key: kp})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(time.Second)
	for range 2 {
		if err := w.Write(ctx, "mcp.v1.events.config.x", []byte(`{"type":"created","server":"x"}`)); err != nil {
			t.Fatal(err)
		}
	}
	var entries []audit.Entry
	if _, err := audit.ReadStream(ctx, js, audit.From{}, 5*time.Second, func(e audit.Entry) { entries = append(entries, e) }); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := r.validate("audit-record", e.Data); err != nil {
			t.Errorf("record %d: %v\n%s", e.StreamSeq, err, e.Data)
		}
	}
	b, _ := json.Marshal(audit.Bundle{Format: audit.BundleFormat, ExportedAt: time.Now().UTC(), FromStart: true,
		Keys: audit.Keys{pub: {Name: "config", Role: "config"}}, Entries: entries})
	if err := r.validate("audit-bundle", b); err != nil {
		t.Errorf("bundle: %v", err)
	}
	var rec map[string]any
	_ = json.Unmarshal(entries[1].Data, &rec)
	for field, bad := range map[string]any{"seq": 0, "prev": "xyz", "chain": "agent.U1", "sig": "not base64url!", "value": "s3cret"} {
		changed := map[string]any{}
		for k, v := range rec {
			changed[k] = v
		}
		changed[field] = bad
		data, _ := json.Marshal(changed)
		if r.validate("audit-record", data) == nil {
			t.Errorf("a record with %s = %v is valid", field, bad)
		}
	}
}
