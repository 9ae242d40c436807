package runner_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A server's answer to the runner's health ping is a server's error text:
// the log gets it redacted (the rules: an AWS key; the server's own
// secrets: its API key) and bounded, as the status and events get such
// texts, not the server's 256 KiB as it wrote them.
func TestHealthPingErrorLoggedRedacted(t *testing.T) {
	const awsKey, apiKey = "AKIAZ3MQXP7R2HKW5Y4N", "hdr-secret-7xyz"
	url := testmcp.ServeHTTP(t, "sick", nil, testmcp.AnswerMethod("ping", func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		msg := fmt.Sprintf("unwell: upstream refused %s and %s; %s", awsKey, apiKey, strings.Repeat("z", 256<<10))
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": -32603, "message": msg}})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	var logs syncBuffer
	opts := quickOpts()
	opts.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	opts.HealthInterval, opts.HealthFailures, opts.TickInterval = 50*time.Millisecond, 1000, 50*time.Millisecond
	e := runnertest.Start(t, opts)
	cfg := httpConfig("sick", url, nil)
	cfg.EnvVars = map[string]model.EnvVar{"API_KEY": {Value: apiKey, IsSecret: true}}
	cfg.Transport.Headers = map[string]string{"X-Api-Key": "${API_KEY}"}
	e.Put(t, cfg)
	e.WaitState(t, "sick", model.StateRunning, 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "health ping failed") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	found := false
	for line := range strings.Lines(logs.String()) {
		if !strings.Contains(line, "health ping failed") {
			continue
		}
		found = true
		if len(line) > 4<<10 {
			t.Errorf("a log record of %d bytes: %.300s…", len(line), line)
		}
		for _, s := range []string{awsKey, apiKey} {
			if strings.Contains(line, s) {
				t.Errorf("the log holds %s: %.300s…", s, line)
			}
		}
	}
	if !found {
		t.Fatalf("no health ping failed in the log:\n%.2000s", logs.String())
	}
}
