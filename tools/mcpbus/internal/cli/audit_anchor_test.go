package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
)

// A chain's newest records removed break no link: verify --bundle passes
// it, and with --anchor (an earlier export) names them missing.
func TestAuditVerifyAnchorFindsATruncatedChain(t *testing.T) {
	srv, err := embednats.Start(embednats.Options{InProcessOnly: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, bus.AuditStream(bus.NewSubjects("mcp.v1"), time.Hour, 1<<30)); err != nil {
		t.Fatal(err)
	}
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	w, err := audit.NewWriter(nc, audit.WriterOptions{Prefix: "mcp.v1", Role: "runner", Key: kp})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(time.Second)
	for range 5 {
		if err := w.Write(ctx, "mcp.v1.events.call.echo", []byte(`{"server":"echo"}`)); err != nil {
			t.Fatal(err)
		}
	}
	var entries []audit.Entry
	if _, err := audit.ReadStream(ctx, js, audit.From{}, 5*time.Second, func(e audit.Entry) { entries = append(entries, e) }); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, entries []audit.Entry, maxAge int64) string {
		b := audit.Bundle{Format: audit.BundleFormat, ExportedAt: time.Now().Add(time.Minute), FromStart: true, MaxAgeSeconds: maxAge,
			Keys: audit.Keys{pub: {Name: "runner-1", Role: "runner"}}, Entries: entries}
		path := filepath.Join(dir, name)
		if err := b.Write(path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	earlier, truncated := write("earlier.json", entries, 3600), write("now.json", entries[:3], 3600)
	// The stream's max age shortened since (to a second), and the chain
	// gone with it: the records the earlier export holds are held to its
	// max age, not the new one.
	shortened := write("shortened.json", nil, 1)
	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"audit", "verify"}, args...), strings.NewReader(""), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	if code, out := run("--bundle", truncated); code != 0 || !strings.Contains(out, "bundle's own public keys") {
		t.Fatalf("without an anchor: exit %d\n%s", code, out)
	}
	if code, out := run("--bundle", truncated, "--anchor", earlier); code != 1 || !strings.Contains(out, "missing: records 4 to 5") {
		t.Fatalf("with the earlier export: exit %d\n%s", code, out)
	}
	if code, out := run("--bundle", shortened, "--anchor", earlier); code != 1 || !strings.Contains(out, "missing: the chain is not stored") {
		t.Fatalf("max age shortened: exit %d\n%s", code, out)
	}
	if code, out := run("--bundle", earlier, "--anchor", earlier); code != 0 {
		t.Fatalf("untouched: exit %d\n%s", code, out)
	}
}
