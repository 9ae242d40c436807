package runner_test

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// Values shaped like real credentials, valid nowhere.
const (
	testAWSKey      = "AKIAZ3MQXP7R2HKW5Y4N"
	testGitHubToken = "ghp_R7dK2mQx9LpV4sTz8NwB3yHc6JfG1aEu5XoP"
	betaSecret      = "beta-stored-secret-7q" // a stored secret of server beta
)

// Secrets in tool arguments are blocked before the server sees them (an
// AWS key, a GitHub token, a stored secret of another server of the
// runner), secrets in results are redacted, on both call paths (raw and
// go-sdk); call events and logs name the rule, never the value.
// secretHolder is beta, a server whose secret TOKEN (betaSecret) the
// resolver of opts gives it.
func secretHolder(opts *runner.Options) model.McpConfig {
	beta := runnertest.Binary("beta", testServer)
	beta.ID = uuid.NewString()
	beta.Runtime.Eager = true
	beta.EnvVars = map[string]model.EnvVar{"TOKEN": {SecretRef: "TOKEN", IsSecret: true, Required: true}}
	opts.Resolver = staticResolver{beta.ID: {Env: map[string]string{"TOKEN": betaSecret}}}
	return beta
}

func TestSecretsBlockedAndRedacted(t *testing.T) {
	var logs syncBuffer
	opts := quickOpts()
	opts.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	beta := secretHolder(&opts)
	e := runnertest.Start(t, opts)
	alpha := runnertest.Binary("alpha", testServer)
	alpha.Runtime.Eager = true
	// gamma lets secrets through to its server (arguments off): its echo
	// brings them back in results, which are redacted (the default).
	gamma := runnertest.Binary("gamma", testServer)
	gamma.Runtime.Eager = true
	gamma.SecretScan.Arguments = model.SecretsOff
	for _, c := range []model.McpConfig{beta, alpha, gamma} {
		e.Put(t, c)
		e.WaitState(t, c.Name, model.StateRunning, 10*time.Second)
	}

	var mu sync.Mutex
	var events []model.CallEvent
	var rawEvents []string
	sub, err := e.NC.Subscribe(bus.NewSubjects("").Event("call", "*"), func(m *nats.Msg) {
		var ev model.CallEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			mu.Lock()
			events, rawEvents = append(events, ev), append(rawEvents, string(m.Data))
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := e.NC.Flush(); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name, server, tool, args, rule, want string
		blocked                              bool
	}{
		{"aws key in arguments", "alpha", "echo", `{"message":"key ` + testAWSKey + `"}`, "aws-access-token", "", true},
		{"github token in arguments", "alpha", "echo", `{"message":"` + testGitHubToken + `"}`, "github-pat", "", true},
		{"another server's secret in arguments", "alpha", "echo", `{"message":"` + betaSecret + `"}`, "mcpbus-known-secret", "", true},
		{"own secret in a result", "beta", "env", `{"name":"TOKEN"}`, "mcpbus-known-secret", "[REDACTED:mcpbus-known-secret]", false},
		{"aws key in a result", "gamma", "echo", `{"message":"key ` + testAWSKey + `"}`, "aws-access-token", "key [REDACTED:aws-access-token]", false},
		{"another server's secret in a result", "gamma", "echo", `{"message":"` + betaSecret + `"}`, "mcpbus-known-secret", "[REDACTED:mcpbus-known-secret]", false},
	}
	for _, raw := range []bool{true, false} {
		runner.SetRawCalls(raw)
		for _, c := range cases {
			res, err := call(t, e, c.server, c.tool, c.args)
			if err != nil {
				t.Fatalf("raw=%v %s: %v", raw, c.name, err)
			}
			var r callResult
			if err := json.Unmarshal(res, &r); err != nil || len(r.Content) == 0 {
				t.Fatalf("raw=%v %s: %s", raw, c.name, res)
			}
			got := r.Content[0].Text
			switch {
			case c.blocked && (!r.IsError || !strings.Contains(got, "rule "+c.rule) || !strings.Contains(got, "blocked")):
				t.Errorf("raw=%v %s: %s, want a refusal naming %s", raw, c.name, res, c.rule)
			case !c.blocked && (r.IsError || got != c.want):
				t.Errorf("raw=%v %s: %q, want %q", raw, c.name, got, c.want)
			}
		}
	}
	runner.SetRawCalls(true)
	// Redact instead of block: the server gets the arguments redacted.
	gamma.SecretScan = model.SecretsPolicy{Arguments: model.SecretsRedact, Results: model.SecretsOff}
	e.Put(t, gamma)
	redacted := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range events {
			if slices.Contains(ev.Secrets, model.SecretFound{Where: "arguments", Rule: "github-pat", Action: "redact"}) {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := call(t, e, "gamma", "echo", `{"message":"`+testGitHubToken+`"}`)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // its event
		if redacted() {
			// The result is not scanned (results off): the server got the marker.
			if got := text(t, res); got != "[REDACTED:github-pat]" {
				t.Fatalf("redacted arguments echoed as %q", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the redact policy was not applied")
		}
	}

	want := 2*len(cases) + 1
	deadline = time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := 0
		for _, ev := range events {
			if len(ev.Secrets) > 0 {
				n++
			}
		}
		mu.Unlock()
		if n >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d call events with secrets, want %d", n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[model.SecretFound]bool{}
	for _, ev := range events {
		for _, f := range ev.Secrets {
			seen[f] = true
		}
	}
	for _, f := range []model.SecretFound{
		{Where: "arguments", Rule: "aws-access-token", Action: "block"},
		{Where: "arguments", Rule: "github-pat", Action: "block"},
		{Where: "arguments", Rule: "mcpbus-known-secret", Action: "block"},
		{Where: "arguments", Rule: "github-pat", Action: "redact"},
		{Where: "result", Rule: "mcpbus-known-secret", Action: "redact"},
		{Where: "result", Rule: "aws-access-token", Action: "redact"},
	} {
		if !seen[f] {
			t.Errorf("no call event says %+v (saw %v)", f, seen)
		}
	}
	out := logs.String()
	if !strings.Contains(out, `"rule":"aws-access-token"`) {
		t.Errorf("the log does not name the rule:\n%s", out)
	}
	for _, v := range []string{testAWSKey, testGitHubToken, betaSecret} {
		for _, ev := range rawEvents {
			if strings.Contains(ev, v) {
				t.Errorf("a call event holds a secret value: %s", ev)
			}
		}
		if strings.Contains(out, v) {
			t.Errorf("the log holds a secret value %s", v)
		}
	}
}
