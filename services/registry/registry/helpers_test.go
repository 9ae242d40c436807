package registry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/registry/registry"
	"github.com/mcpbus/mcpbus/services/registry/registrytest"
)

// env is a registry service on an embedded NATS, in front of fake
// registries serving the fixtures of ../testdata.
type env struct {
	ns  *embednats.Server
	nc  *nats.Conn
	off *registrytest.Official
	smi *registrytest.Smithery
	log *syncBuffer
}

type setup struct {
	opts        registry.Options
	official    []json.RawMessage // nil: the fixtures
	smitheryKey string            // the fake Smithery demands it
	commands    []string          // installed commands (default npx and docker)
}

func fixtureOfficial(t testing.TB) []json.RawMessage {
	t.Helper()
	var all []json.RawMessage
	for _, f := range []string{"../testdata/official-sample.json", "../testdata/official-more.json"} {
		s, err := registrytest.LoadOfficial(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, s...)
	}
	return all
}

func fixtureSmithery(t testing.TB) *registrytest.SmitheryData {
	t.Helper()
	d, err := registrytest.LoadSmithery("../testdata/smithery-sample.json")
	if err != nil {
		t.Fatal(err)
	}
	more, err := registrytest.LoadSmithery("../testdata/smithery-more.json")
	if err != nil {
		t.Fatal(err)
	}
	d.Merge(more)
	return d
}

func start(t *testing.T, s setup) *env {
	t.Helper()
	e := &env{log: &syncBuffer{}}
	var err error
	e.ns, err = embednats.Start(embednats.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.ns.Stop)
	e.nc, err = e.ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nc.Close)
	if s.official == nil {
		s.official = fixtureOfficial(t)
	}
	e.off, err = registrytest.NewOfficial(s.official)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.off.Close)
	e.smi, err = registrytest.NewSmithery(fixtureSmithery(t), s.smitheryKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.smi.Close)
	if s.commands == nil {
		s.commands = []string{"npx", "docker"}
	}
	opts := s.opts
	opts.OfficialURL = e.off.URL
	opts.SmitheryURL = e.smi.URL
	if opts.HasCommand == nil {
		cmds := s.commands
		opts.HasCommand = func(c string) bool { return slices.Contains(cmds, c) }
	}
	opts.Logger = e.logger()
	e.run(t, e.nc, opts)
	return e
}

// logger writes the service's log into e.log, debug level included.
func (e *env) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// run starts one service instance until the test ends.
func (e *env) run(t *testing.T, nc *nats.Conn, opts registry.Options) {
	t.Helper()
	svc, err := registry.New(nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("registry service did not stop")
		}
	})
	select {
	case <-svc.Ready():
	case err := <-done:
		t.Fatalf("registry service ended: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("registry service not ready")
	}
}

func (e *env) search(t *testing.T, req model.RegistrySearchRequest) *model.RegistrySearchReply {
	t.Helper()
	out, err := registry.Search(context.Background(), e.nc, "", req)
	if err != nil {
		t.Fatalf("search %+v: %v", req, err)
	}
	return out
}

func (e *env) searchErr(t *testing.T, req model.RegistrySearchRequest) *apierr.Error {
	t.Helper()
	out, err := registry.Search(context.Background(), e.nc, "", req)
	if err == nil {
		t.Fatalf("search %+v: want an error, got %+v", req, out)
	}
	return asAPIErr(t, err)
}

func (e *env) get(t *testing.T, req model.RegistryGetRequest) *model.InstallPlan {
	t.Helper()
	out, err := registry.Get(context.Background(), e.nc, "", req)
	if err != nil {
		t.Fatalf("get %+v: %v", req, err)
	}
	return out
}

func (e *env) getErr(t *testing.T, req model.RegistryGetRequest) *apierr.Error {
	t.Helper()
	out, err := registry.Get(context.Background(), e.nc, "", req)
	if err == nil {
		t.Fatalf("get %+v: want an error, got %+v", req, out)
	}
	return asAPIErr(t, err)
}

func asAPIErr(t *testing.T, err error) *apierr.Error {
	t.Helper()
	var ae *apierr.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an *apierr.Error", err)
	}
	return ae
}

func names(rs []model.RegistryResult) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

func find(rs []model.RegistryResult, name string) *model.RegistryResult {
	for i := range rs {
		if rs[i].Name == name || rs[i].QualifiedName == name {
			return &rs[i]
		}
	}
	return nil
}

// syncBuffer collects the service's log lines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

var _ io.Writer = (*syncBuffer)(nil)

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
