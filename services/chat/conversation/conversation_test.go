package conversation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/conversation"
)

// bus is an embedded server on disk whose only users are the chat identity
// (with the permission table's rights: the log must work within them) and
// an unrestricted test user.
type bus struct {
	t     *testing.T
	ns    *embednats.Server
	chat  access.Identity
	admin nkeys.KeyPair
}

func startBus(t *testing.T) *bus {
	t.Helper()
	ids, err := access.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	chat, err := ids.Ensure("chat", access.Chat)
	if err != nil {
		t.Fatal(err)
	}
	user, err := access.User(chat, "mcp.v1")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	adminPub, _ := admin.PublicKey()
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: filepath.Join(t.TempDir(), "js"),
		Users: []*server.NkeyUser{user, {Nkey: adminPub}}})
	if err != nil {
		t.Fatal(err)
	}
	b := &bus{t: t, ns: ns, chat: chat, admin: admin}
	t.Cleanup(func() { b.ns.Stop() })
	return b
}

// restart stops the server and starts it again on the same port and files.
func (b *bus) restart() {
	b.t.Helper()
	opts := b.ns.Options()
	b.ns.Stop()
	ns, err := embednats.Start(opts)
	if err != nil {
		b.t.Fatal(err)
	}
	b.ns = ns
}

// connectChat connects as the chat service.
func (b *bus) connectChat() *nats.Conn {
	b.t.Helper()
	kp, err := nkeys.FromSeed(b.chat.Seed)
	if err != nil {
		b.t.Fatal(err)
	}
	nc, err := b.ns.ConnectTCP(nats.Nkey(b.chat.Public, kp.Sign), nats.CustomInboxPrefix(b.chat.Inbox()),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { b.t.Logf("chat connection: %v", err) }))
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(nc.Close)
	return nc
}

func (b *bus) connectAdmin() *nats.Conn {
	b.t.Helper()
	pub, _ := b.admin.PublicKey()
	nc, err := b.ns.ConnectTCP(nats.Nkey(pub, b.admin.Sign))
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(nc.Close)
	return nc
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openLog(t *testing.T, nc *nats.Conn) *conversation.Log {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := conversation.Open(ctxT(t), js, conversation.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func entry(kind, turn string, payload any) model.ChatEntry {
	e := model.ChatEntry{Kind: kind, Turn: turn}
	if payload != nil {
		e.Payload, _ = json.Marshal(payload)
	}
	return e
}

func wantCode(t *testing.T, err error, code apierr.Code, field string) {
	t.Helper()
	if apierr.Of(err) != code {
		t.Fatalf("error %v: code %s, want %s", err, apierr.Of(err), code)
	}
	if field != "" && apierr.From(err).Field != field {
		t.Fatalf("error %v: field %q, want %q", err, apierr.From(err).Field, field)
	}
}

func TestAppendReadInOrder(t *testing.T) {
	b := startBus(t)
	l := openLog(t, b.connectChat())
	ctx := ctxT(t)
	const conv = "0b6f2a4e-3c1d-4f7a-9a53-2f9f4b8c1d2e"
	kinds := []string{model.EntryUserMessage, model.EntryModelStep, model.EntryToolCall, model.EntryApproval,
		model.EntryToolResult, model.EntryModelStep, model.EntryTurnEnd}
	for i, k := range kinds {
		got, err := l.Append(ctx, conv, entry(k, "t1", map[string]int{"i": i}))
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq != uint64(i+1) || got.At.IsZero() || got.At.Location() != time.UTC {
			t.Fatalf("append %d returned %+v", i, got)
		}
	}
	// Another conversation in between changes nothing of the first.
	if _, err := l.Append(ctx, "other", entry(model.EntryUserMessage, "t9", nil)); err != nil {
		t.Fatal(err)
	}
	// Claiming the next slot explicitly works; a taken or future one does not.
	if got, err := l.Append(ctx, conv, model.ChatEntry{Seq: 8, Kind: model.EntryUserMessage, Turn: "t2"}); err != nil || got.Seq != 8 {
		t.Fatalf("claim 8: %+v %v", got, err)
	}
	_, err := l.Append(ctx, conv, model.ChatEntry{Seq: 8, Kind: model.EntryModelStep, Turn: "t2"})
	wantCode(t, err, apierr.Conflict, "")
	_, err = l.Append(ctx, conv, model.ChatEntry{Seq: 10, Kind: model.EntryModelStep, Turn: "t2"})
	wantCode(t, err, apierr.Conflict, "")

	entries, err := l.Read(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 8 {
		t.Fatalf("read %d entries, want 8", len(entries))
	}
	for i, e := range entries {
		if e.Seq != uint64(i+1) {
			t.Errorf("entry %d has seq %d", i, e.Seq)
		}
		if i < len(kinds) {
			var p map[string]int
			if err := json.Unmarshal(e.Payload, &p); err != nil || p["i"] != i || e.Kind != kinds[i] || e.Turn != "t1" {
				t.Errorf("entry %d: %+v", i, e)
			}
		}
	}
	if entries[7].Turn != "t2" {
		t.Errorf("last entry %+v", entries[7])
	}
}

// TestAppendAfter: a writer that holds the tail of its last append (or
// read) appends without reading first, and any other write since makes its
// next append a CONFLICT that writes nothing.
func TestAppendAfter(t *testing.T) {
	b := startBus(t)
	l := openLog(t, b.connectChat())
	ctx := ctxT(t)
	const conv = "after"
	entries, tail, err := l.ReadTail(ctx, conv)
	wantCode(t, err, apierr.NotFound, "")
	if len(entries) != 0 || tail != (conversation.Tail{}) {
		t.Fatalf("empty log: %v %+v", entries, tail)
	}
	for i := range 3 {
		var got model.ChatEntry
		got, tail, err = l.AppendAfter(ctx, conv, tail, entry(model.EntryUserMessage, "t1", map[string]int{"i": i}))
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq != uint64(i+1) || tail.Seq != got.Seq || tail.StreamSeq == 0 || got.At.IsZero() || got.At.Location() != time.UTC {
			t.Fatalf("append %d: %+v, tail %+v", i, got, tail)
		}
	}
	entries, read, err := l.ReadTail(ctx, conv)
	if err != nil || len(entries) != 3 || read != tail {
		t.Fatalf("read %d entries, tail %+v (appends ended at %+v): %v", len(entries), read, tail, err)
	}
	// A slot other than the tail's next is refused.
	_, _, err = l.AppendAfter(ctx, conv, tail, model.ChatEntry{Seq: 5, Kind: model.EntryModelStep, Turn: "t1"})
	wantCode(t, err, apierr.Conflict, "")
	// Another conversation's entries do not move this one's tail.
	if _, err := l.Append(ctx, "elsewhere", entry(model.EntryUserMessage, "t9", nil)); err != nil {
		t.Fatal(err)
	}
	if _, tail, err = l.AppendAfter(ctx, conv, tail, entry(model.EntryModelStep, "t1", nil)); err != nil || tail.Seq != 4 {
		t.Fatalf("append after another conversation's: %+v %v", tail, err)
	}
	// Another writer appends: the stale tail no longer claims a slot.
	if _, err := l.Append(ctx, conv, entry(model.EntryUserMessage, "t2", nil)); err != nil {
		t.Fatal(err)
	}
	_, _, err = l.AppendAfter(ctx, conv, tail, entry(model.EntryModelStep, "t1", nil))
	wantCode(t, err, apierr.Conflict, "")
	// So does a purge, and an append onto a stale empty tail.
	if err := l.Delete(ctx, conv); err != nil {
		t.Fatal(err)
	}
	_, _, err = l.AppendAfter(ctx, conv, tail, entry(model.EntryModelStep, "t1", nil))
	wantCode(t, err, apierr.Conflict, "")
	if _, err := l.Append(ctx, conv, entry(model.EntryUserMessage, "t3", nil)); err != nil {
		t.Fatal(err)
	}
	_, _, err = l.AppendAfter(ctx, conv, conversation.Tail{}, entry(model.EntryUserMessage, "t4", nil))
	wantCode(t, err, apierr.Conflict, "")
	if entries, err := l.Read(ctx, conv); err != nil || len(entries) != 1 || entries[0].Turn != "t3" {
		t.Fatalf("after the refused appends: %+v %v", entries, err)
	}
}

func TestBadInputRefused(t *testing.T) {
	b := startBus(t)
	l := openLog(t, b.connectChat())
	ctx := ctxT(t)
	for _, id := range []string{"", "a.b", "a*", "a>", "*", ">", "a b", "UPPER", "x/y", string(make([]byte, 65)), strings.Repeat("a", 65)} {
		_, err := l.Append(ctx, id, entry(model.EntryUserMessage, "t1", nil))
		wantCode(t, err, apierr.Validation, "conversation")
		_, err = l.Read(ctx, id)
		wantCode(t, err, apierr.Validation, "conversation")
		wantCode(t, l.Delete(ctx, id), apierr.Validation, "conversation")
	}
	_, err := l.Append(ctx, "c1", model.ChatEntry{Kind: "thought", Turn: "t1"})
	wantCode(t, err, apierr.Validation, "kind")
	_, err = l.Append(ctx, "c1", model.ChatEntry{Kind: model.EntryUserMessage, Turn: "t.1"})
	wantCode(t, err, apierr.Validation, "turn")
	_, err = l.Append(ctx, "c1", model.ChatEntry{Kind: model.EntryUserMessage, Turn: "t1", Payload: json.RawMessage(`[1]`)})
	wantCode(t, err, apierr.Validation, "payload")
	// Nothing was written.
	_, err = l.Read(ctx, "c1")
	wantCode(t, err, apierr.NotFound, "")
	if list, err := l.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("list after refusals: %v %v", list, err)
	}
}

// TestConcurrentAppenders: several chat instances (own connections) race
// for every slot of one conversation; exactly one wins each.
func TestConcurrentAppenders(t *testing.T) {
	b := startBus(t)
	const writers, slots = 4, 25
	const conv = "race"
	logs := make([]*conversation.Log, writers)
	for i := range logs {
		logs[i] = openLog(t, b.connectChat())
	}
	ctx := ctxT(t)
	won := make([][]uint64, writers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			<-start
			for slot := uint64(1); slot <= slots; slot++ {
				e := entry(model.EntryModelStep, "t1", map[string]any{"writer": w, "slot": slot})
				e.Seq = slot
				got, err := logs[w].Append(ctx, conv, e)
				switch apierr.Of(err) {
				case "":
					if got.Seq != slot {
						t.Errorf("writer %d claimed %d, got %d", w, slot, got.Seq)
					}
					won[w] = append(won[w], slot)
				case apierr.Conflict:
				default:
					t.Errorf("writer %d slot %d: %v", w, slot, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	owner := map[uint64]int{}
	total := 0
	for w, slotsWon := range won {
		for _, s := range slotsWon {
			if prev, ok := owner[s]; ok {
				t.Errorf("slot %d won by writers %d and %d", s, prev, w)
			}
			owner[s] = w
			total++
		}
	}
	if total != slots {
		t.Errorf("%d slots won, want %d", total, slots)
	}
	entries, err := logs[0].Read(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != slots {
		t.Fatalf("log has %d entries, want %d", len(entries), slots)
	}
	for i, e := range entries {
		var p struct {
			Writer int    `json:"writer"`
			Slot   uint64 `json:"slot"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if e.Seq != uint64(i+1) || p.Slot != e.Seq || owner[e.Seq] != p.Writer {
			t.Errorf("entry %d: seq %d payload %+v, slot won by %d", i, e.Seq, p, owner[e.Seq])
		}
	}

	// Appends at the next free slot (Seq 0) from all writers at once all
	// land, each in its own slot.
	var mu sync.Mutex
	var seqs []uint64
	for w := range writers {
		wg.Go(func() {
			for range 5 {
				got, err := logs[w].Append(ctx, conv, entry(model.EntryToolResult, "t2", nil))
				if err != nil {
					if apierr.Of(err) != apierr.Conflict {
						t.Errorf("writer %d: %v", w, err)
					}
					continue
				}
				mu.Lock()
				seqs = append(seqs, got.Seq)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(seqs)
	if len(slices.Compact(slices.Clone(seqs))) != len(seqs) {
		t.Errorf("a slot was appended twice: %v", seqs)
	}
	entries, err = logs[1].Read(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != slots+len(seqs) {
		t.Errorf("log has %d entries, want %d", len(entries), slots+len(seqs))
	}
}

func TestReadAfterReconnect(t *testing.T) {
	b := startBus(t)
	ctx := ctxT(t)
	l := openLog(t, b.connectChat())
	for i := range 3 {
		if _, err := l.Append(ctx, "durable", entry(model.EntryUserMessage, "t1", map[string]int{"i": i})); err != nil {
			t.Fatal(err)
		}
	}
	// The server restarts (files kept); a new instance reads the log and continues it.
	b.restart()
	l2 := openLog(t, b.connectChat())
	entries, err := l2.Read(ctx, "durable")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 || entries[2].Seq != 3 {
		t.Fatalf("after restart: %+v", entries)
	}
	got, err := l2.Append(ctx, "durable", model.ChatEntry{Seq: 4, Kind: model.EntryTurnEnd, Turn: "t1"})
	if err != nil || got.Seq != 4 {
		t.Fatalf("append after restart: %+v %v", got, err)
	}
}

func TestListAndDelete(t *testing.T) {
	b := startBus(t)
	ctx := ctxT(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	nc := b.connectChat()
	js, _ := jetstream.New(nc)
	l, err := conversation.Open(ctx, js, conversation.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"a", "b", "c"} {
		for j := range i + 1 {
			if _, err := l.Append(ctx, id, entry(model.EntryUserMessage, fmt.Sprintf("t%d", j), nil)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(5 * time.Millisecond) // distinct stream times
	}
	list, err := l.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].Conversation != "c" || list[0].Entries != 3 || list[0].LastSeq != 3 || list[2].Conversation != "a" || list[2].Entries != 1 {
		t.Fatalf("list: %+v", list)
	}
	if list[0].LastActivity.IsZero() || list[0].LastActivity.Before(list[2].LastActivity) {
		t.Fatalf("last activity: %+v", list)
	}

	if err := l.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	_, err = l.Read(ctx, "b")
	wantCode(t, err, apierr.NotFound, "")
	wantCode(t, l.Delete(ctx, "b"), apierr.NotFound, "")
	wantCode(t, l.Delete(ctx, "never"), apierr.NotFound, "")
	list, err = l.List(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("list after delete: %+v %v", list, err)
	}
	// The others are intact, and a deleted conversation starts again at 1.
	if entries, err := l.Read(ctx, "c"); err != nil || len(entries) != 3 {
		t.Fatalf("c after delete of b: %v %v", entries, err)
	}
	if got, err := l.Append(ctx, "b", entry(model.EntryUserMessage, "t1", nil)); err != nil || got.Seq != 1 {
		t.Fatalf("b again: %+v %v", got, err)
	}

	// The stream holds exactly what the log wrote, on the documented subjects.
	st, err := jsOf(t, b.connectAdmin()).Stream(ctx, "MCP_CHAT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"mcp.v1.chat.log.a": 1, "mcp.v1.chat.log.b": 1, "mcp.v1.chat.log.c": 3}
	if fmt.Sprint(info.State.Subjects) != fmt.Sprint(want) {
		t.Errorf("stream subjects %v, want %v", info.State.Subjects, want)
	}
}

func jsOf(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
