package runner_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// syncBuffer is a log destination the runner's goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A server that prints its own secrets to stderr: the runner's debug log has
// the lines with [REDACTED] in place of every resolved value (secret
// reference, extra stored secret, keyfile, inline secret), while plain values
// and the rest of each line stay.
func TestStderrRedactsSecrets(t *testing.T) {
	dir := t.TempDir()
	keyfile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyfile, []byte("keyfile-secret-9xyz\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := runnertest.Binary("alpha", testServer)
	cfg.ID = uuid.NewString()
	cfg.Runtime.Eager = true
	cfg.SecretScan.Results = model.SecretsOff // it reads its secrets back through the env tool
	cfg.EnvVars = map[string]model.EnvVar{
		"TOKEN":             {SecretRef: "TOKEN", IsSecret: true, Required: true},
		"KEY":               {KeyfilePath: keyfile},
		"INLINE":            {Value: "inline-secret-3xyz", IsSecret: true},
		"DB_PASS":           {Value: "db-pass-4xyz"}, // named like a secret, written inline
		"PLAIN":             {Value: "plain-value"},
		"TESTMCP_PRINT_ENV": {Value: "TOKEN,EXTRA,KEY,INLINE,DB_PASS,PLAIN"},
	}
	var logs syncBuffer
	opts := quickOpts()
	opts.KeyfilePrefixes = []string{dir}
	opts.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.Resolver = staticResolver{cfg.ID: {Env: map[string]string{"TOKEN": "resolved-secret-1xyz", "EXTRA": "extra-secret-2xyz"}}}
	e := runnertest.Start(t, opts)
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)

	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "testserver env PLAIN") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	out := logs.String()
	for _, name := range []string{"TOKEN", "EXTRA", "KEY", "INLINE", "DB_PASS"} {
		if want := "testserver env " + name + "=[REDACTED] (printed at start)"; !strings.Contains(out, want) {
			t.Errorf("debug log lacks the redacted line %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "testserver env PLAIN=plain-value (printed at start)") {
		t.Errorf("plain value redacted or its line missing:\n%s", out)
	}
	for _, secret := range []string{"resolved-secret-1xyz", "extra-secret-2xyz", "keyfile-secret-9xyz", "inline-secret-3xyz", "db-pass-4xyz"} {
		if strings.Contains(out, secret) {
			t.Errorf("debug log holds secret %s:\n%s", secret, out)
		}
	}
	// The child itself still got the real values.
	if res, err := call(t, e, "alpha", "env", `{"name":"TOKEN"}`); err != nil || text(t, res) != "resolved-secret-1xyz" {
		t.Fatalf("TOKEN = %s (%v)", res, err)
	}
}

// A server's stderr is its own to write, and the runner relays it to its
// debug log: a server flooding it (10,000 lines at once, a line of 60 KiB)
// leaves a bounded log, each record cut, with a record that lines were
// dropped.
func TestStderrLogBounded(t *testing.T) {
	flood := make([]string, 10_000)
	for i := range flood {
		flood[i] = fmt.Sprint("flood-", i)
	}
	cfg := runnertest.Binary("alpha", testServer)
	cfg.Runtime.Eager = true
	cfg.EnvVars = map[string]model.EnvVar{
		"LONG":              {Value: strings.Repeat("y", 60<<10)},
		"FLOOD":             {Value: strings.Join(flood, "\n")},
		"TESTMCP_PRINT_ENV": {Value: "LONG,FLOOD"},
	}
	var logs syncBuffer
	opts := quickOpts()
	opts.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := runnertest.Start(t, opts)
	e.Put(t, cfg)
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	// Until the log stops growing: every line read has been relayed or dropped.
	for n, last := 0, -1; n != last; time.Sleep(300 * time.Millisecond) {
		last, n = n, len(logs.String())
	}

	relayed, dropped := 0, false
	for line := range strings.Lines(logs.String()) {
		if len(line) > 8<<10 {
			t.Errorf("a log record of %d bytes: %.200s…", len(line), line)
		}
		if strings.Contains(line, `"msg":"server stderr"`) {
			relayed++
		}
		dropped = dropped || strings.Contains(line, `"msg":"server stderr lines dropped"`)
	}
	if relayed > 500 || !dropped {
		t.Errorf("%d stderr lines relayed of %d (dropped said: %v), want at most 500 and a record of the rest", relayed, len(flood)+1, dropped)
	}
	if !strings.Contains(logs.String(), "testserver env LONG=yyyy") {
		t.Errorf("the long line is not in the log, cut")
	}
}
