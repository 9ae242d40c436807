package audit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
)

// A chain's newest record deleted (from the server's files: the server
// refuses turning deny_delete off) breaks no link; but records leave the
// stream only from its start, so the hole in its sequences is named. The
// deletion is made here on a stream created without deny_delete.
func TestDeletedNewestRecordIsAGap(t *testing.T) {
	nc, js := bed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := bus.AuditStream(bus.NewSubjects(prefix), time.Hour, 1<<30)
	cfg.DenyDelete = false
	recreateAudit(ctx, t, js, cfg)
	kpA, pubA := newKey(t)
	kpB, pubB := newKey(t)
	a, b := writer(t, nc, "runner", kpA), writer(t, nc, "config", kpB)
	for i := range 3 { // A1 B1 A2 B2 A3 B3: A3 is stream seq 5
		for _, w := range []*Writer{a, b} {
			if err := w.Write(ctx, prefix+".events.call.echo", event(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	st, err := js.Stream(ctx, bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, 5); err != nil {
		t.Fatal(err)
	}
	keys := Keys{pubA: {Name: "runner-1", Role: "runner"}, pubB: {Name: "config", Role: "config"}}
	verify := func(from From) Report {
		v := NewVerifier(keys, VerifyOptions{})
		page, err := ReadPage(ctx, js, from, 0, 5*time.Second, v.Add)
		if err != nil {
			t.Fatal(err)
		}
		v.SetFromStart(page.FromStart)
		v.SetStream(page.Start, page.Floor)
		if page.Unprotected != "deny_delete off" {
			t.Errorf("unprotected %q", page.Unprotected)
		}
		return v.Report()
	}
	for _, from := range []From{{}, {Seq: 5}} {
		rep := verify(from)
		if rep.OK() || rep.Problems[0].Kind != Missing || rep.Problems[0].Chain != StreamChain || rep.Problems[0].StreamSeq != 6 {
			t.Errorf("from %d: problems %v; want stream sequence 5 missing", from.Seq, rep.Problems)
		}
	}
	// What left the stream's start (age, size) is no gap.
	v := NewVerifier(keys, VerifyOptions{})
	_, err = ReadPage(ctx, js, From{Seq: 6}, 0, 5*time.Second, v.Add)
	if err != nil {
		t.Fatal(err)
	}
	v.SetStream(1, 6)
	if rep := v.Report(); !rep.OK() {
		t.Fatalf("records below the floor: %v", rep.Problems)
	}
}

// A stream created first without the audit settings (by another identity
// allowed to create it, or by hand) is taken as it is by the services:
// verify says it is not append-only.
func TestUnprotectedStreamIsNamed(t *testing.T) {
	_, js := bed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := bus.AuditStream(bus.NewSubjects(prefix), time.Hour, 1<<30)
	cfg.DenyPurge, cfg.MaxMsgsPerSubject = false, 2
	recreateAudit(ctx, t, js, cfg)
	if _, err := js.Publish(ctx, prefix+".audit.runner.x", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	v := NewVerifier(Keys{}, VerifyOptions{})
	page, err := ReadPage(ctx, js, From{}, 0, 5*time.Second, func(Entry) {})
	if err != nil {
		t.Fatal(err)
	}
	v.SetUnprotected(page.Unprotected)
	rep := v.Report()
	if rep.OK() || rep.Problems[0].Kind != Unprotected || !strings.Contains(rep.Problems[0].Detail, "deny_purge off, a message count limit") {
		t.Fatalf("problems %v", rep.Problems)
	}
}

// recreateAudit replaces the bed's audit stream with one of cfg.
// nats-server may still be removing the deleted stream's files: its store
// cannot be made again at once (err_code 10049) on a loaded host.
func recreateAudit(ctx context.Context, t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) {
	t.Helper()
	if err := js.DeleteStream(ctx, bus.StreamAudit); err != nil {
		t.Fatal(err)
	}
	for _, err := js.CreateStream(ctx, cfg); err != nil; _, err = js.CreateStream(ctx, cfg) {
		if ctx.Err() != nil {
			t.Fatalf("creating the stream again: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
