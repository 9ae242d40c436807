package runner_test

import (
	"bytes"
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
