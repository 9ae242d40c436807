package client_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

// fakeRunner answers discovery as a runner publishing p.
func fakeRunner(t *testing.T, nc *nats.Conn, id string, p model.ExecPolicy) {
	t.Helper()
	md := p.Metadata()
	maps.Copy(md, map[string]string{"runner": id})
	svc, err := micro.AddService(nc, micro.Config{Name: "mcpbus-runner", Version: "0.0.1", Metadata: md})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
}

// A keyfile path that every runner's --keyfile-prefixes refuses is refused
// before cred set stores it (the doc's `cred set gcp API_KEY --keyfile
// ~/.config/gcp/key.txt` against mcpbus up, whose runner takes only
// <data-dir>/keyfiles, was stored and then failed every start); one runner
// accepting it, or no runner answering, lets it through.
func TestCheckKeyfiles(t *testing.T) {
	nc := startNATS(t)
	c := client.New(nc, client.Options{Timeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	outside := map[string]string{"API_KEY": "/home/u/.config/gcp/key.txt"}
	if err := c.CheckKeyfiles(ctx, outside, 100*time.Millisecond); err != nil {
		t.Fatalf("no runner answering: %v", err)
	}

	fakeRunner(t, nc, "r1", model.ExecPolicy{KeyfilePrefixes: []string{"/data/keyfiles"}})
	err := c.CheckKeyfiles(ctx, outside, 0)
	var e *apierr.Error
	if apierr.Of(err) != apierr.Validation || !strings.Contains(err.Error(), "not under an allowed path on runner r1") {
		t.Fatalf("a path outside --keyfile-prefixes: %v", err)
	}
	if e, _ = err.(*apierr.Error); e == nil || e.Field != "keyfiles.API_KEY" {
		t.Fatalf("field of %v", err)
	}
	if err := c.CheckKeyfiles(ctx, map[string]string{"API_KEY": "/data/keyfiles/gcp.key"}, 0); err != nil {
		t.Fatalf("a path under the prefix: %v", err)
	}

	fakeRunner(t, nc, "r2", model.ExecPolicy{KeyfilePrefixes: []string{"/home/u/.config"}})
	if err := c.CheckKeyfiles(ctx, outside, 0); err != nil {
		t.Fatalf("a path one runner accepts: %v", err)
	}
}
