package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
)

const prefix = "mcp.v1"

// bed is an embedded server with the audit stream.
func bed(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
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
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, bus.AuditStream(bus.NewSubjects(prefix), time.Hour, 1<<30)); err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func newKey(t testing.TB) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}

func writer(t testing.TB, nc *nats.Conn, role string, kp nkeys.KeyPair) *Writer {
	t.Helper()
	w, err := NewWriter(nc, WriterOptions{Prefix: prefix, Role: role, Key: kp, Queue: 20000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(time.Second) })
	return w
}

func event(i int) []byte {
	return fmt.Appendf(nil, `{"server":"echo","tool":"echo","request_id":"r%d","ok":true}`, i)
}

// read verifies the whole stream.
func read(t testing.TB, js jetstream.JetStream, keys Keys, from From) (Report, []Entry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var entries []Entry
	fromStart, err := ReadStream(ctx, js, from, 10*time.Second, func(e Entry) { entries = append(entries, e) })
	if err != nil {
		t.Fatal(err)
	}
	v := NewVerifier(keys, VerifyOptions{FromStart: fromStart})
	for _, e := range entries {
		v.Add(e)
	}
	return v.Report(), entries
}

func TestChainOf10000EventsVerifies(t *testing.T) {
	nc, js := bed(t)
	kp, pub := newKey(t)
	w := writer(t, nc, "runner", kp)
	start := time.Now()
	for i := range 10000 {
		w.Append(prefix+".events.call.echo", event(i))
	}
	w.Close(time.Minute)
	wrote := time.Since(start)
	if w.Dropped() != 0 {
		t.Fatalf("%d events dropped", w.Dropped())
	}
	start = time.Now()
	rep, entries := read(t, js, Keys{pub: {Name: "runner", Role: "runner"}}, From{})
	t.Logf("10,000 events: written in %v, read and verified in %v", wrote, time.Since(start))
	t.Logf("10,000 events in %d records", rep.Records)
	if !rep.OK() || rep.Events != 10000 || len(rep.Chains) != 1 || rep.Chains[0].Last != uint64(rep.Records) || rep.Chains[0].Identity != "runner" {
		t.Fatalf("report: events %d, records %d, chains %+v, problems %v", rep.Events, rep.Records, rep.Chains, first(rep.Problems, 3))
	}
	// The same records verify as a bundle, after a round trip through JSON.
	var buf bytes.Buffer
	b := Bundle{Format: BundleFormat, FromStart: true, Keys: Keys{pub: {Name: "runner", Role: "runner"}}, Entries: entries[:min(1000, len(entries))]}
	if err := json.NewEncoder(&buf).Encode(b); err != nil {
		t.Fatal(err)
	}
	back, err := ReadBundle(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if rep := back.Verify(); !rep.OK() || rep.Records != len(back.Entries) {
		t.Fatalf("bundle: %d records, problems %v", rep.Records, first(rep.Problems, 3))
	}
	// Without the writer's key nothing is trusted.
	if rep := (&Bundle{Keys: Keys{}, Entries: entries[:10]}).Verify(); rep.OK() || rep.Problems[0].Kind != UnknownKey {
		t.Fatalf("unknown key not found: %v", first(rep.Problems, 1))
	}
}

func first(p []Problem, n int) []Problem { return p[:min(n, len(p))] }

// bundleOf writes n events of two writers and exports them.
func bundleOf(t *testing.T, n int) *Bundle {
	t.Helper()
	b, _ := bundleAndKey(t, n)
	return b
}

// bundleAndKey is bundleOf and the runner's key.
func bundleAndKey(t *testing.T, n int) (*Bundle, nkeys.KeyPair) {
	t.Helper()
	nc, js := bed(t)
	kpA, pubA := newKey(t)
	kpB, pubB := newKey(t)
	a, b := writer(t, nc, "runner", kpA), writer(t, nc, "config", kpB)
	ctx := context.Background()
	for i := range n {
		w := a
		if i%4 == 3 {
			w = b
		}
		if err := w.Write(ctx, prefix+".events.call.echo", event(i)); err != nil {
			t.Fatal(err)
		}
	}
	keys := Keys{pubA: {Name: "runner-1", Role: "runner"}, pubB: {Name: "config", Role: "config"}}
	rep, entries := read(t, js, keys, From{})
	if !rep.OK() || rep.Records != n || len(rep.Chains) != 2 {
		t.Fatalf("untouched: %+v", rep)
	}
	return &Bundle{Format: BundleFormat, FromStart: true, Keys: keys, Entries: entries}, kpA
}

func TestTamperingIsFoundAndNamed(t *testing.T) {
	orig := bundleOf(t, 40)
	clone := func() *Bundle {
		b := *orig
		b.Entries = make([]Entry, len(orig.Entries))
		for i, e := range orig.Entries {
			e.Data = bytes.Clone(e.Data)
			b.Entries[i] = e
		}
		return &b
	}
	edit := func(e *Entry, f func(r *Record)) {
		var r Record
		if err := json.Unmarshal(e.Data, &r); err != nil {
			t.Fatal(err)
		}
		f(&r)
		e.Data, _ = json.Marshal(r)
	}
	// Entry 20 (stream seq 21) is the runner chain's record 16.
	for _, tc := range []struct {
		name   string
		tamper func(b *Bundle)
		kind   string
		seq    uint64 // stream sequence named
		record uint64
	}{
		{"altered event", func(b *Bundle) {
			edit(&b.Entries[20], func(r *Record) { r.Events[0].Event = json.RawMessage(`{"server":"echo","ok":false}`) })
		}, Altered, 21, 16},
		{"altered time", func(b *Bundle) {
			edit(&b.Entries[20], func(r *Record) { r.Time = r.Time.Add(-time.Hour) })
		}, Altered, 21, 16},
		{"deleted", func(b *Bundle) { b.Entries = append(b.Entries[:20], b.Entries[21:]...) }, Missing, 22, 17},
		{"reordered", func(b *Bundle) {
			b.Entries[20].Data, b.Entries[21].Data = b.Entries[21].Data, b.Entries[20].Data
		}, Reordered, 21, 17},
		{"bad signature", func(b *Bundle) {
			var other Record
			_ = json.Unmarshal(b.Entries[21].Data, &other)
			edit(&b.Entries[20], func(r *Record) { r.Sig = other.Sig })
		}, BadSignature, 21, 16},
		{"re-signed by another key", func(b *Bundle) {
			kp, _ := nkeys.CreateUser()
			edit(&b.Entries[20], func(r *Record) { _ = r.seal(kp) })
		}, BadSignature, 21, 16},
		{"moved to another chain", func(b *Bundle) { b.Entries[20].Subject = b.Entries[19].Subject }, Altered, 21, 16},
		{"first record deleted", func(b *Bundle) { b.Entries = b.Entries[1:] }, Missing, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := clone()
			if tc.name == "moved to another chain" && b.Entries[19].Subject == b.Entries[20].Subject {
				b.Entries[20].Subject = strings.Replace(b.Entries[20].Subject, ".runner.", ".config.", 1)
			}
			tc.tamper(b)
			rep := b.Verify()
			if rep.OK() {
				t.Fatal("tampering not found")
			}
			p := rep.Problems[0]
			if p.Kind != tc.kind || p.StreamSeq != tc.seq || p.Seq != tc.record {
				t.Fatalf("first broken link %v; want %s at stream seq %d record %d (all: %v)", p, tc.kind, tc.seq, tc.record, rep.Problems)
			}
		})
	}
}

// An operator with raw JetStream access rewrites the stream (a copy with
// record 5 altered): verifying the stream names it.
func TestRewrittenStreamIsFound(t *testing.T) {
	orig := bundleOf(t, 10)
	_, js := bed(t)
	ctx := context.Background()
	for i, e := range orig.Entries {
		data := e.Data
		if i == 4 {
			data = bytes.Replace(data, []byte(`"ok":true`), []byte(`"ok":false`), 1)
		}
		if _, err := js.Publish(ctx, e.Subject, data); err != nil {
			t.Fatal(err)
		}
	}
	rep, _ := read(t, js, orig.Keys, From{})
	if rep.OK() || rep.Problems[0].Kind != Altered || rep.Problems[0].StreamSeq != 5 {
		t.Fatalf("problems %v; want altered at stream seq 5", rep.Problems)
	}
	// From a later point the chains are anchored at their first record read.
	if rep, _ := read(t, js, orig.Keys, From{Seq: 6}); !rep.OK() || rep.Records != 5 {
		t.Fatalf("from seq 6: %+v", rep)
	}
}

// A writer drops an event that is not JSON (instead of retrying it for
// ever), writes what was queued before Close, and takes Appends after
// Close without panicking.
func TestWriterQueueEnds(t *testing.T) {
	nc, js := bed(t)
	kp, pub := newKey(t)
	w := writer(t, nc, "runner", kp)
	w.Append(prefix+".events.call.echo", []byte("not json"))
	for i := range 5 {
		w.Append(prefix+".events.call.echo", event(i))
	}
	w.Close(10 * time.Second)
	w.Append(prefix+".events.call.echo", event(6))
	rep, _ := read(t, js, Keys{pub: {Name: "runner", Role: "runner"}}, From{})
	if !rep.OK() || rep.Events != 5 {
		t.Fatalf("%+v", rep)
	}
}

func TestRestartedWriterContinuesItsChain(t *testing.T) {
	nc, js := bed(t)
	kp, pub := newKey(t)
	ctx := context.Background()
	for range 2 { // a writer, then its restart
		w := writer(t, nc, "runner", kp)
		for i := range 3 {
			if err := w.Write(ctx, prefix+".events.call.echo", event(i)); err != nil {
				t.Fatal(err)
			}
		}
		w.Close(time.Second)
	}
	rep, _ := read(t, js, Keys{pub: {Name: "runner", Role: "runner"}}, From{})
	if !rep.OK() || len(rep.Chains) != 1 || rep.Chains[0].Last != 6 {
		t.Fatalf("%+v", rep)
	}
}

// Two processes of one identity write at once: the chain stays linear.
func TestWritersSharingAnIdentityKeepOneChain(t *testing.T) {
	nc, js := bed(t)
	kp, pub := newKey(t)
	var wg sync.WaitGroup
	for range 2 {
		w := writer(t, nc, "runner", kp)
		wg.Go(func() {
			for i := range 100 {
				if err := w.Write(context.Background(), prefix+".events.call.echo", event(i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	rep, _ := read(t, js, Keys{pub: {Name: "runner", Role: "runner"}}, From{})
	if !rep.OK() || rep.Records != 200 || len(rep.Chains) != 1 || rep.Chains[0].Last != 200 {
		t.Fatalf("records %d chains %+v problems %v", rep.Records, rep.Chains, first(rep.Problems, 3))
	}
}

func TestStreamRefusesPurgeAndDelete(t *testing.T) {
	nc, js := bed(t)
	kp, _ := newKey(t)
	if err := writer(t, nc, "runner", kp).Write(context.Background(), prefix+".events.call.echo", event(1)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := js.Stream(ctx, bus.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err == nil {
		t.Fatal("purge allowed")
	}
	if err := st.DeleteMsg(ctx, 1); err == nil {
		t.Fatal("delete allowed")
	}
	if err := st.SecureDeleteMsg(ctx, 1); err == nil {
		t.Fatal("secure delete allowed")
	}
}

// The call path's cost (Append) and the writer's per-event sealing cost.
func BenchmarkAppend(b *testing.B) {
	w := &Writer{q: newQueue(1 << 16), log: slog.New(slog.DiscardHandler)}
	ev := event(1)
	for b.Loop() {
		if len(w.q.items)-w.q.head == w.q.max { // empty the queue outside the timing: no drops
			b.StopTimer()
			for _, ok := w.q.pop(); ok; _, ok = w.q.pop() {
			}
			b.StartTimer()
		}
		w.Append(prefix+".events.call.echo", ev)
	}
	if w.Dropped() != 0 {
		b.Fatalf("%d dropped", w.Dropped())
	}
}

// The writer's signer signs as the nkey does, byte for byte, and a key
// without its seed still signs through nkeys.
func TestSignerSignsAsTheNkey(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	s := signerOf(kp)
	if _, ok := s.(seedSigner); !ok {
		t.Fatalf("signer of a seeded key is %T, want the derived key", s)
	}
	for _, msg := range [][]byte{nil, []byte("x"), []byte(strings.Repeat("digest", 11))} {
		want, err := kp.Sign(msg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Sign(msg)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("signature of %q differs from the nkey's", msg)
		}
		if err := kp.Verify(msg, got); err != nil {
			t.Fatalf("the nkey does not verify the signer's signature: %v", err)
		}
	}
	pubOnly, err := nkeys.FromPublicKey(mustPublic(t, kp))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := signerOf(pubOnly).(nkeys.KeyPair); !ok {
		t.Fatal("a key without its seed got a derived signer")
	}
}

func mustPublic(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// BenchmarkSeal is one record of one event, sealed as the writer seals it
// (signerOf) and through nkeys' own Sign, which derives the key each time.
func BenchmarkSeal(b *testing.B) {
	kp, _ := nkeys.CreateUser()
	ev := event(1)
	for _, s := range []struct {
		name string
		sign signer
	}{{"writer", signerOf(kp)}, {"nkeys", kp}} {
		b.Run(s.name, func(b *testing.B) {
			for b.Loop() {
				r := Record{V: Version, Chain: "runner.UABC", Seq: 1, Prev: "00", Time: time.Now(), Events: []Event{{Subject: prefix + ".events.call.echo", Event: ev}}}
				if err := r.seal(s.sign); err != nil {
					b.Fatal(err)
				}
				if _, err := json.Marshal(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A record of 64 events (what queues up under load): the cost per event.
func BenchmarkSeal64(b *testing.B) {
	kp, _ := nkeys.CreateUser()
	events := make([]Event, 64)
	for i := range events {
		events[i] = Event{Subject: prefix + ".events.call.echo", Event: event(i)}
	}
	for b.Loop() {
		r := Record{V: Version, Chain: "runner.UABC", Seq: 1, Prev: "00", Time: time.Now(), Events: events}
		if err := r.seal(signerOf(kp)); err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events))/1000, "µs/event")
}

func BenchmarkVerifyRecord(b *testing.B) {
	kp, pub := newKey(b)
	r := Record{V: Version, Chain: ChainOf("runner", pub), Seq: 1, Time: time.Now(), Events: []Event{{Subject: prefix + ".events.call.echo", Event: event(1)}}}
	if err := r.seal(kp); err != nil {
		b.Fatal(err)
	}
	data, _ := json.Marshal(r)
	v := NewVerifier(Keys{pub: {Role: "runner"}}, VerifyOptions{})
	for b.Loop() {
		v.Add(Entry{StreamSeq: 1, Subject: prefix + ".audit." + r.Chain, Data: data})
	}
}

// TestLargeEventsKeepTheChainGoing: an event too large for one message (a
// tool_changed event quotes two definitions of up to a catalog each) is
// kept as its digest with its small fields, and a large event never pushes
// a record past the bus's max_payload: the chain goes on, in order, where
// the writer retried the same refused record forever before.
func TestLargeEventsKeepTheChainGoing(t *testing.T) {
	nc, js := bed(t)
	kp, pub := newKey(t)
	w := writer(t, nc, "runner", kp)
	limit := int(nc.MaxPayload())
	field := func(c string, n int) string { return strings.Repeat(c, n) }
	huge := []byte(`{"server":"evil","tool":"t","pinned":"` + field("a", limit/2+1) + `","pending":"` + field("b", limit/2+1) + `"}`)
	mid := []byte(`{"server":"s","x":"` + field("m", maxBatchBytes-1000) + `"}`)
	big := []byte(`{"server":"s","x":"` + field("z", limit-recordHeadroom-1000) + `"}`)
	// Fits as written, not once encoding/json escapes its < as \u003c.
	html := []byte(`{"server":"html","x":"` + field("<", (limit-recordHeadroom)/2) + `"}`)
	w.Append(prefix+".events.tool_changed.evil", huge)
	w.Append(prefix+".events.tool_changed.s", mid)
	w.Append(prefix+".events.tool_changed.s", big)
	for i := range 5 {
		w.Append(prefix+".events.call.echo", event(i))
	}
	w.Append(prefix+".events.tool_changed.html", html)
	w.Close(30 * time.Second)
	rep, entries := read(t, js, Keys{pub: {Name: "runner", Role: "runner"}}, From{})
	if !rep.OK() || rep.Events != 9 {
		t.Fatalf("report: %d events in %d records, problems %v", rep.Events, rep.Records, first(rep.Problems, 3))
	}
	var events []Event
	for _, e := range entries {
		if len(e.Data) > limit {
			t.Fatalf("a record of %d bytes, over max_payload %d", len(e.Data), limit)
		}
		var r Record
		if err := json.Unmarshal(e.Data, &r); err != nil {
			t.Fatal(err)
		}
		events = append(events, r.Events...)
	}
	var stand struct {
		Server, Tool string
		Pinned       *string
		Oversized    struct {
			Bytes  int
			SHA256 string
		} `json:"audit_oversized"`
	}
	if err := json.Unmarshal(events[0].Event, &stand); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(huge)
	if stand.Server != "evil" || stand.Tool != "t" || stand.Pinned != nil || stand.Oversized.Bytes != len(huge) || stand.Oversized.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("the oversized event's stand-in: %s", events[0].Event)
	}
	if !bytes.Equal(events[1].Event, mid) || !bytes.Equal(events[2].Event, big) {
		t.Fatal("the large events that fit a message were not kept whole, in order")
	}
	for i, e := range events[3:8] {
		if !bytes.Equal(e.Event, event(i)) {
			t.Fatalf("event %d: %s", i, e.Event)
		}
	}
	if last := events[8].Event; !bytes.Contains(last, []byte(`"server":"html"`)) || !bytes.Contains(last, []byte(`"audit_oversized"`)) {
		t.Fatalf("the escaped event's stand-in: %.200s", last)
	}
}
