package bus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// smallServer is a JetStream server with store bytes of file storage: a
// server's default storage is a share of the free disk, so a fuller disk
// looks like this.
func smallServer(t *testing.T, store int64) jetstream.JetStream {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		JetStreamMaxStore: store, JetStreamMaxMemory: 64 << 20, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// warningOf is the logged warning line naming what, or "".
func warningOf(logs, what string) string {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, what) {
			return line
		}
	}
	return ""
}

// TestAssetsFitASmallServer: the shared assets come up on a server with less
// storage than their default bounds (1 GiB each; a 600 MiB server is what
// nats-server offers on a disk with 800 MB free), each bounded by a share
// of what was left, instead of start-up waiting forever on "insufficient
// storage resources" (CI's split stacks did, on a machine with less free
// disk); and each says, in its warning, what it asked, what it got and how
// to get the full size.
func TestAssetsFitASmallServer(t *testing.T) {
	const store = 600 << 20
	js := smallServer(t, store)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs testkit.LogBuffer
	a, err := bus.EnsureAssets(ctx, js, bus.NewSubjects("mcp.v1"), bus.AssetOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("EnsureAssets on a 600 MiB server: %v", err)
	}
	var sum int64
	for _, st := range []jetstream.Stream{a.Events, a.Audit} {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b := info.Config.MaxBytes
		if b < 64<<20 || b >= 1<<30 {
			t.Errorf("%s: MaxBytes %d, want a fitted bound of at least 64 MiB, under 1 GiB", info.Config.Name, b)
		}
		sum += b
		w := warningOf(logs.String(), "stream "+info.Config.Name)
		for _, want := range []string{"1 GiB asked", fmt.Sprintf("bounded at %d MiB", b>>20), "--nats-max-store", "free disk"} {
			if !strings.Contains(w, want) {
				t.Errorf("%s: the warning %q does not say %q", info.Config.Name, w, want)
			}
		}
	}
	if sum > store {
		t.Errorf("the bounds reserve %d bytes, more than the server's %d", sum, store)
	}
	// What is left still takes the chat's streams (made the same way).
	for _, name := range []string{"CHAT_A", "CHAT_B"} {
		if _, err := bus.FitStream(ctx, js, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, MaxBytes: 2 << 30}, nil); err != nil {
			t.Errorf("%s after the shared assets: %v", name, err)
		}
	}
}

// TestAssetsOnAServerBelowTheFloor: on a server with less storage than the
// smallest bound worth having (64 MiB), start-up fails within seconds with
// an error that says what was asked, that the storage is full and what to
// do, instead of waiting out its whole deadline on JetStream's bare
// "insufficient storage resources available" (or making 16 MiB streams).
func TestAssetsOnAServerBelowTheFloor(t *testing.T) {
	js := smallServer(t, 48<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	began := time.Now()
	_, err := bus.EnsureAssets(ctx, js, bus.NewSubjects("mcp.v1"), bus.AssetOptions{})
	if err == nil {
		t.Fatal("EnsureAssets on a 48 MiB server succeeded; want the floor refused")
	}
	if took := time.Since(began); took > 30*time.Second {
		t.Errorf("the refusal took %s: start-up should give up on a full server within seconds", took)
	}
	for _, want := range []string{"stream " + bus.StreamEvents, "1 GiB asked", "not even 64 MiB fits", "storage is full", "free disk", "--nats-max-store"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if !bus.InsufficientStorage(err) {
		t.Errorf("the error does not wrap JetStream's refusal: %v", err)
	}
}

// TestBucketOnAFullServerSaysWhatToDo: once streams have reserved all of a
// server's storage, a bucket (which reserves no bound but needs a byte of
// room) is refused too: its set-up fails within seconds saying what to do.
func TestBucketOnAFullServerSaysWhatToDo(t *testing.T) {
	js := smallServer(t, 128<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ALL", Subjects: []string{"all.>"}, MaxBytes: 128 << 20}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	_, err := bus.EnsureKV(ctx, js, jetstream.KeyValueConfig{Bucket: "late"}, 1, nil)
	if err == nil {
		t.Fatal("a bucket on a full server was made")
	}
	if took := time.Since(began); took > 30*time.Second {
		t.Errorf("the refusal took %s: want it within seconds", took)
	}
	for _, want := range []string{"bucket late", "no storage left", "--nats-max-store"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
}

// TestFitNeverShrinksAStream: asking an existing stream for more than the
// server can reserve leaves it as it is (a smaller bound than it had would
// drop its oldest records), and says so.
func TestFitNeverShrinksAStream(t *testing.T) {
	js := smallServer(t, 512<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep.>"}, MaxBytes: 256 << 20}
	if _, err := bus.FitStream(ctx, js, cfg, nil); err != nil {
		t.Fatal(err)
	}
	// The rest of the server's storage is taken.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "REST", Subjects: []string{"rest.>"}, MaxBytes: 256 << 20}); err != nil {
		t.Fatal(err)
	}
	var logs testkit.LogBuffer
	cfg.MaxBytes = 1 << 30
	_, err := bus.FitStream(ctx, js, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err == nil {
		t.Fatal("raising the bound past the server's storage succeeded")
	}
	st, err2 := js.Stream(ctx, "KEEP")
	if err2 != nil {
		t.Fatal(err2)
	}
	if got := st.CachedInfo().Config.MaxBytes; got != 256<<20 {
		t.Errorf("the stream's bound is %d after a refused raise (%v), want it kept at %d", got, err, 256<<20)
	}
	if w := warningOf(logs.String(), "stream KEEP"); !strings.Contains(w, "keeps 256 MiB") || !strings.Contains(w, "1 GiB asked") {
		t.Errorf("the refused raise was not logged as kept: %q", w)
	}
}

// TestFitRaisesAStreamOnlyUpward: a raise the server cannot take in full is
// halved, but never below the stream's own bound, and its records stay.
func TestFitRaisesAStreamOnlyUpward(t *testing.T) {
	js := smallServer(t, 512<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: "GROW", Subjects: []string{"grow.>"}, MaxBytes: 200 << 20}
	if _, err := bus.FitStream(ctx, js, cfg, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := js.Publish(ctx, "grow.x", bytes.Repeat([]byte{'x'}, 10<<10)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	cfg.MaxBytes = 4 << 30
	st, err := bus.FitStream(ctx, js, cfg, nil)
	if err != nil {
		t.Fatalf("a raise past the server's storage: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b := info.Config.MaxBytes; b < 200<<20 || b > 512<<20 {
		t.Errorf("bound %d after the raise: want between its own 200 MiB and the server's 512 MiB", b)
	}
	if info.State.Msgs != 100 {
		t.Errorf("%d records after the raise, want the 100 stored", info.State.Msgs)
	}
}

// TestFitGivesUpAtTheFloor: a server with no room at all refuses every
// bound; the fit ends with an error that says so (wrapping JetStream's)
// rather than looping.
func TestFitGivesUpAtTheFloor(t *testing.T) {
	js := smallServer(t, 512<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ALL", Subjects: []string{"all.>"}, MaxBytes: 512 << 20}); err != nil {
		t.Fatal(err)
	}
	_, err := bus.FitStream(ctx, js, jetstream.StreamConfig{Name: "MORE", Subjects: []string{"more.>"}, MaxBytes: 1 << 30}, nil)
	if !bus.InsufficientStorage(err) {
		t.Fatalf("got %v, want JetStream's insufficient storage error", err)
	}
	var se *bus.StorageError
	if !errors.As(err, &se) || se.Asked != 1<<30 || se.Tried != bus.MinFitBytes {
		t.Fatalf("got %#v, want a StorageError: 1 GiB asked, %d tried", err, bus.MinFitBytes)
	}
}

// TestBudget: bounds that together ask more than two thirds of a server's
// storage are scaled down in proportion (whole MiB, none below the floor);
// bounds that fit, or an unknown storage, are left as they are.
func TestBudget(t *testing.T) {
	const mib = 1 << 20
	asks := []int64{1 << 30, 1 << 30, 2 << 30, 1 << 30, 0}
	for _, c := range []struct {
		store  int64
		want   []int64
		scaled bool
	}{
		{600 * mib, []int64{80 * mib, 80 * mib, 160 * mib, 80 * mib, 0}, true},
		{3 << 30, []int64{409 * mib, 409 * mib, 819 * mib, 409 * mib, 0}, true},
		{48 * mib, []int64{bus.MinFitBytes, bus.MinFitBytes, bus.MinFitBytes, bus.MinFitBytes, 0}, true},
		{8 << 30, asks, false},
		{0, asks, false},
	} {
		got, scaled := bus.Budget(c.store, asks...)
		if scaled != c.scaled || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("Budget(%d MiB) = %v %v, want %v %v", c.store/mib, got, scaled, c.want, c.scaled)
		}
	}
}

// TestAssetsKeepALargerBound: a smaller bound asked of an existing stream
// (a default, or mcpbus up's share of a disk that has since filled) does
// not shrink it, which would drop its oldest records at once.
func TestAssetsKeepALargerBound(t *testing.T) {
	js := smallServer(t, 4<<30)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := bus.EnsureAssets(ctx, js, bus.NewSubjects(""), bus.AssetOptions{EventsMaxBytes: 100 << 20, AuditMaxBytes: 100 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []jetstream.Stream{a.Events, a.Audit} {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Config.MaxBytes; got != 1<<30 {
			t.Errorf("%s: bound %d MiB after a smaller ask, want its 1024 MiB kept", info.Config.Name, got>>20)
		}
	}
}
