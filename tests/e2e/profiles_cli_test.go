package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// chatKey is the API key of the scripted model: its requests must carry it,
// so an answer proves the key went from the CLI, sealed, to the model.
const chatKey = "sk-e2e-chat-5f0c2d9e"

// chatStack is a real `mcpbus up` (chat service included) and a scripted
// model server; with servers, the everything server runs too.
type chatStack struct {
	bin, url string
	up       *clitest.Up
	llm      *llmtest.Server
}

func startChatStack(t *testing.T, servers bool) *chatStack {
	t.Helper()
	s := &chatStack{bin: mcpbusBin, llm: llmtest.Start(t, chatKey)}
	dir := t.TempDir()
	args := []string{"--data-dir", filepath.Join(dir, "data")}
	if servers {
		args = append(args, "--config", everythingServersFile(t, dir))
	}
	s.up = startUp(t, s.bin, dir, clitest.Env(), args...)
	s.url = s.up.NATSURL()
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		r := cli(t, s.bin, s.url, "profiles", "list")
		return r.Code == 0, r.String()
	})
	if servers {
		waitCLIState(t, s.bin, s.url, "everything", model.StateRunning, 30*time.Second)
	}
	return s
}

// run runs a CLI command with stdin; no output may show the API key.
func (s *chatStack) run(t *testing.T, stdin string, args ...string) clitest.Result {
	t.Helper()
	r := cliIn(t, s.bin, s.url, stdin, nil, args...)
	if strings.Contains(r.Stdout+r.Stderr, chatKey) {
		t.Fatalf("mcpbus %v printed the API key: %s", args, r)
	}
	return r
}

// must is run that fails the test on a non-zero exit.
func (s *chatStack) must(t *testing.T, stdin string, args ...string) clitest.Result {
	t.Helper()
	r := s.run(t, stdin, args...)
	if r.Code != 0 {
		t.Fatalf("mcpbus %v: %s", args, r)
	}
	return r
}

// addProfile adds a profile on the scripted model, its key read from stdin.
func (s *chatStack) addProfile(t *testing.T, name string, flags ...string) {
	t.Helper()
	args := append([]string{"profiles", "add", name, "--provider", "openai", "--model", "scripted",
		"--base-url", s.llm.OpenAIBaseURL(), "--api-key-stdin"}, flags...)
	s.must(t, chatKey+"\n", args...)
}

func (s *chatStack) profile(t *testing.T, name string) model.Profile {
	t.Helper()
	r := s.must(t, "", "profiles", "get", name, "--json")
	var p model.Profile
	if err := json.Unmarshal([]byte(r.Stdout), &p); err != nil {
		t.Fatalf("profiles get --json: %v: %s", err, r.Stdout)
	}
	return p
}

// TestCLIProfiles manages chat profiles against a real mcpbus up: the key
// goes in on stdin or from the environment, is sealed, never shown; edit
// keeps what it is not told to change; bad input comes back as field errors.
func TestCLIProfiles(t *testing.T) {
	t.Parallel()
	s := startChatStack(t, false)

	r := s.must(t, chatKey+"\n", "profiles", "add", "work", "--provider", "openai", "--model", "scripted",
		"--base-url", s.llm.OpenAIBaseURL(), "--api-key-stdin", "--system-prompt", "Be brief.",
		"--deny", "*__delete_*", "--allow", "everything__*", "--ask", "*", "--price-in", "3", "--price-out", "15", "--currency", "USD")
	if !strings.Contains(r.Stdout, "profile work saved") || !strings.Contains(r.Stdout, "API key stored") {
		t.Fatalf("profiles add: %s", r)
	}
	p := s.profile(t, "work")
	wantRules := []model.ApprovalRule{{Tool: "*__delete_*", Decision: "deny"}, {Tool: "everything__*", Decision: "allow"}, {Tool: "*", Decision: "ask"}}
	if !p.HasAPIKey || p.APIKeyRef != model.ChatProfileCredentialID("work") || p.SystemPrompt != "Be brief." ||
		fmt.Sprint(p.Approval.Rules) != fmt.Sprint(wantRules) || p.Prices == nil || p.Prices.OutputPerMTok != 15 || p.Revision == 0 {
		t.Fatalf("stored profile %+v", p)
	}

	r = s.must(t, "", "profiles", "list")
	if !strings.Contains(r.Stdout, "work") || !strings.Contains(r.Stdout, s.llm.OpenAIBaseURL()) || !strings.Contains(r.Stdout, "yes") {
		t.Fatalf("profiles list: %s", r)
	}
	r = s.must(t, "", "profiles", "get", "work")
	for _, want := range []string{"api key:", "stored", "deny *__delete_*", "Be brief."} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("profiles get lacks %q: %s", want, r.Stdout)
		}
	}

	// edit: only what is given changes; the key stays.
	s.must(t, "", "profiles", "edit", "work", "--model", "scripted-2", "--max-steps", "5")
	p2 := s.profile(t, "work")
	if p2.Model != "scripted-2" || p2.MaxSteps != 5 || p2.BaseURL != p.BaseURL || p2.SystemPrompt != p.SystemPrompt ||
		len(p2.Approval.Rules) != 3 || !p2.HasAPIKey || p2.Revision <= p.Revision {
		t.Fatalf("after edit: %+v", p2)
	}
	// --owner makes it one principal's; "" shares it again.
	s.must(t, "", "profiles", "edit", "work", "--owner", "key:k123")
	if p3 := s.profile(t, "work"); p3.Owner != "key:k123" || !strings.Contains(s.must(t, "", "profiles", "get", "work").Stdout, "key:k123") {
		t.Fatalf("after --owner: %+v", p3)
	}
	s.must(t, "", "profiles", "edit", "work", "--owner", "")
	if p3 := s.profile(t, "work"); p3.Owner != "" {
		t.Fatalf("after --owner '': %+v", p3)
	}
	if r := s.run(t, "", "profiles", "edit", "work"); r.Code == 0 || !strings.Contains(r.Stderr, "nothing to change") {
		t.Errorf("edit without flags: %s", r)
	}
	// remove the key, then set it again from the environment.
	s.must(t, "", "profiles", "edit", "work", "--remove-api-key")
	if s.profile(t, "work").HasAPIKey {
		t.Fatal("--remove-api-key left the key")
	}
	if r := cliIn(t, s.bin, s.url, "", []string{"CHAT_KEY=" + chatKey}, "profiles", "edit", "work", "--api-key-env", "CHAT_KEY"); r.Code != 0 {
		t.Fatalf("edit --api-key-env: %s", r)
	}
	if !s.profile(t, "work").HasAPIKey {
		t.Fatal("--api-key-env did not store the key")
	}

	// On a terminal the key is asked for, without echo.
	term := startTerminal(t, s, "profiles", "add", "typed", "--provider", "anthropic", "--model", "claude-x", "--base-url", s.llm.URL)
	term.expect(t, "API key: ")
	term.waitNoEcho(t)
	term.send(t, chatKey+"\n")
	term.expect(t, "profile typed saved")
	if code := term.wait(t, 10*time.Second); code != 0 || strings.Contains(term.output(), chatKey) {
		t.Fatalf("profiles add on a terminal: exit %d, output %q", code, term.output())
	}
	if p := s.profile(t, "typed"); !p.HasAPIKey || p.Provider != model.ChatProviderAnthropic {
		t.Fatalf("typed profile %+v", p)
	}
	// The typed key is the one the model wants (Anthropic's x-api-key).
	s.llm.Enqueue(llmtest.Text("hi from the scripted claude"))
	if r := s.must(t, "", "chat", "--profile", "typed", "-m", "hi"); r.Stdout != "hi from the scripted claude\n" {
		t.Fatalf("chat with the typed key: %s", r)
	}

	// bad input: field errors, nothing stored.
	for _, c := range []struct {
		args  []string
		field string
	}{
		{[]string{"profiles", "add", "bad", "--provider", "gemini", "--model", "m", "--no-api-key"}, "field provider"},
		{[]string{"profiles", "add", "bad", "--provider", "openai", "--no-api-key"}, "field model"},
		{[]string{"profiles", "add", "bad", "--provider", "openai", "--model", "m", "--base-url", "ftp://x", "--no-api-key"}, "field base_url"},
		{[]string{"profiles", "add", "bad", "--provider", "openai", "--model", "m", "--approval-default", "maybe", "--no-api-key"}, "field approval.default"},
		{[]string{"profiles", "add", "bad", "--provider", "openai", "--model", "m"}, "field api_key"}, // stdin is no terminal
		{[]string{"profiles", "add", "work", "--provider", "openai", "--model", "m", "--no-api-key"}, "CONFLICT"},
	} {
		r := s.run(t, "", c.args...)
		if r.Code == 0 || !strings.Contains(r.Stderr, c.field) {
			t.Errorf("%v: want an error with %q, got %s", c.args, c.field, r)
		}
	}
	r = s.run(t, "", "profiles", "add", "bad", "--provider", "gemini", "--model", "m", "--no-api-key", "--json")
	var e struct{ Code, Field string }
	if r.Code == 0 || json.Unmarshal([]byte(r.Stdout), &e) != nil || e.Code != "VALIDATION_ERROR" || e.Field != "provider" {
		t.Errorf("--json error: %s", r)
	}

	// a profile without a key (and no local base_url) is refused at send,
	// before any model request.
	s.must(t, "", "profiles", "add", "nokey", "--provider", "openai", "--model", "m", "--no-api-key")
	before := s.llm.Attempts()
	r = s.run(t, "", "chat", "--profile", "nokey", "-m", "hello")
	if r.Code == 0 || !strings.Contains(r.Stderr, "VALIDATION_ERROR") || !strings.Contains(r.Stderr, "no API key") {
		t.Errorf("chat with a keyless profile: %s", r)
	}
	if s.llm.Attempts() != before {
		t.Errorf("the model was asked %d times for a profile without a key", s.llm.Attempts()-before)
	}

	// rm deletes the profile.
	s.must(t, "", "profiles", "rm", "work")
	if r := s.run(t, "", "profiles", "get", "work"); r.Code == 0 || !strings.Contains(r.Stderr, "NOT_FOUND") {
		t.Errorf("get after rm: %s", r)
	}
	if r := s.must(t, "", "profiles", "list", "--json"); strings.Contains(r.Stdout, `"work"`) {
		t.Errorf("list after rm: %s", r.Stdout)
	}
	s.up.Stop(t, 15*time.Second)
	if strings.Contains(s.up.Output(), chatKey) {
		t.Fatal("the API key is in the mcpbus up log")
	}
}

// TestCLIChatServiceAbsent: without a chat service the commands fail at
// once with a clear error, they do not hang.
func TestCLIChatServiceAbsent(t *testing.T) {
	t.Parallel()
	bin := mcpbusBin
	url := startBus(t).NS.ClientURL() // a bus with a runner and nothing else
	for _, args := range [][]string{
		{"profiles", "list"},
		{"chat", "--profile", "p", "-m", "hi"},
		{"chat", "list"},
	} {
		start := time.Now()
		r := cliIn(t, bin, url, "", nil, args...)
		if r.Code == 0 || !strings.Contains(r.Stderr, "chat service is not running") {
			t.Errorf("%v: %s", args, r)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("%v took %s", args, d)
		}
	}
}
