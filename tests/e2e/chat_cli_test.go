package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/services/chat/llmtest"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

var convLine = regexp.MustCompile(`conversation ([0-9a-f-]{36})`)

// TestCLIChat talks to the scripted model through `mcpbus chat` on a real
// mcpbus up, with the real everything server as the tools: one-shot with a
// tool call, --json events, an approval answered inline, a failed turn, the
// conversation commands, the interactive chat in a pseudo-terminal, and a
// server's request for input (elicitation) answered field by field there.
func TestCLIChat(t *testing.T) {
	t.Parallel()
	s := startChatStack(t, true)
	s.addProfile(t, "p", "--ask", "everything__get-sum")
	var conv string

	t.Run("one-shot with a tool call", func(t *testing.T) {
		s.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("everything__echo", `{"message":"hello bus"}`)), llmtest.Text("The echo said hello bus."))
		r := s.must(t, "", "chat", "--profile", "p", "-m", "echo hello bus")
		if r.Stdout != "The echo said hello bus.\n" {
			t.Errorf("stdout %q, want only the answer", r.Stdout)
		}
		if !regexp.MustCompile(`✓ everything__echo \([0-9.]+ ms\)`).MatchString(r.Stderr) {
			t.Errorf("no ✓ line on stderr: %q", r.Stderr)
		}
		m := convLine.FindStringSubmatch(r.Stderr)
		if m == nil {
			t.Fatalf("no conversation id on stderr: %q", r.Stderr)
		}
		conv = m[1]
		// The tool really ran: its result went back to the model.
		if body := string(s.llm.Last().Body); !strings.Contains(body, "Echo: hello bus") {
			t.Errorf("the model's second request lacks the tool result: %s", body)
		}
	})

	t.Run("json events of a continued conversation", func(t *testing.T) {
		s.llm.Enqueue(llmtest.Text("still here"))
		r := s.must(t, "", "chat", conv, "--json", "-m", "are you there?")
		var kinds []string
		for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
			var ev model.ChatEvent
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("stdout line %q is not an event: %v", line, err)
			}
			if ev.Conversation != conv {
				t.Errorf("event of conversation %q, want %q", ev.Conversation, conv)
			}
			kinds = append(kinds, ev.Kind)
		}
		if len(kinds) < 3 || kinds[0] != model.ChatEventTextDelta || kinds[len(kinds)-1] != model.ChatEventDone {
			t.Errorf("event kinds %v", kinds)
		}
		// The conversation kept its history: the model saw the first exchange.
		if body := string(s.llm.Last().Body); !strings.Contains(body, "echo hello bus") {
			t.Errorf("the continued conversation lost its history: %s", body)
		}
	})

	t.Run("approval answered inline", func(t *testing.T) {
		s.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("everything__get-sum", `{"a":2,"b":3}`)), llmtest.Text("2 + 3 = 5"))
		r := s.must(t, "y\n", "chat", conv, "-m", "add 2 and 3")
		if !strings.Contains(r.Stderr, `Allow everything__get-sum {"a":2,"b":3}? [y]es / [n]o / [a]lways in this conversation`) {
			t.Errorf("no approval prompt: %q", r.Stderr)
		}
		if !strings.Contains(r.Stderr, "✓ everything__get-sum") || r.Stdout != "2 + 3 = 5\n" {
			t.Errorf("approved call: %s", r)
		}
		if body := string(s.llm.Last().Body); !strings.Contains(body, "The sum of 2 and 3 is 5.") {
			t.Errorf("the model did not get the sum: %s", body)
		}

		// n denies: the call is not run and the model is told.
		s.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("everything__get-sum", `{"a":1,"b":1}`)), llmtest.Text("ok, not adding"))
		r = s.must(t, "n\n", "chat", conv, "-m", "add 1 and 1")
		if strings.Contains(r.Stderr, "✓ everything__get-sum") || r.Stdout != "ok, not adding\n" {
			t.Errorf("denied call: %s", r)
		}
		if body := string(s.llm.Last().Body); !strings.Contains(body, "denied") {
			t.Errorf("the model was not told of the denial: %s", body)
		}

		// No answer on stdin denies rather than waiting.
		s.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("everything__get-sum", `{"a":1,"b":2}`)), llmtest.Text("nobody answered"))
		r = s.must(t, "", "chat", conv, "-m", "add 1 and 2")
		if !strings.Contains(r.Stderr, "no answer on stdin: denied") || r.Stdout != "nobody answered\n" {
			t.Errorf("unanswered approval: %s", r)
		}
	})

	t.Run("a failed turn exits non-zero", func(t *testing.T) {
		s.llm.Enqueue(llmtest.Reply{Status: 400, Message: "scripted refusal"})
		r := s.run(t, "", "chat", conv, "-m", "fail please")
		if r.Code == 0 || !strings.Contains(r.Stderr, "scripted refusal") || r.Stdout != "" {
			t.Errorf("failed turn: %s", r)
		}
	})

	t.Run("list, history, rm", func(t *testing.T) {
		r := s.must(t, "", "chat", "list")
		if !strings.Contains(r.Stdout, conv) {
			t.Fatalf("chat list: %s", r)
		}
		r = s.must(t, "", "chat", "history", conv)
		for _, want := range []string{"you: echo hello bus", "→ everything__echo", "✓ everything__echo", "model: The echo said hello bus.",
			"approval everything__get-sum: approve", "approval everything__get-sum: deny", "turn ended: error"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("chat history lacks %q:\n%s", want, r.Stdout)
			}
		}
		s.must(t, "", "chat", "rm", conv)
		if r := s.must(t, "", "chat", "list"); strings.Contains(r.Stdout, conv) {
			t.Errorf("chat list after rm: %s", r)
		}
		if r := s.run(t, "", "chat", conv, "-m", "hi"); r.Code == 0 || !strings.Contains(r.Stderr, "not found") {
			t.Errorf("continuing a deleted conversation: %s", r)
		}
	})

	t.Run("joining a running turn", func(t *testing.T) {
		// A slug names the conversation; one client starts a slow turn...
		s.llm.Enqueue(llmtest.Slow(llmtest.Text("slow words arrive one by one until the end"), 250*time.Millisecond))
		first := make(chan clitest.Result, 1)
		go func() {
			first <- cliIn(t, s.bin, s.url, "", nil, "chat", "--profile", "p", "joined", "-m", "talk slowly")
		}()
		testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
			r := cli(t, s.bin, s.url, "chat", "history", "joined", "--json")
			return r.Code == 0 && strings.Contains(r.Stdout, "talk slowly"), r.String()
		})
		// ...and a terminal that opens the conversation follows it to its end.
		term := startTerminal(t, s, "chat", "joined")
		term.expect(t, "a turn is running")
		term.expect(t, "the end")
		term.expect(t, "> ")
		term.send(t, "\x04")
		if code := term.wait(t, 10*time.Second); code != 0 {
			t.Errorf("exit %d", code)
		}
		select {
		case r := <-first:
			if r.Code != 0 || r.Stdout != "slow words arrive one by one until the end\n" {
				t.Errorf("the first client: %s", r)
			}
		case <-time.After(30 * time.Second):
			t.Error("the first client did not end")
		}
	})

	t.Run("interactive in a terminal", func(t *testing.T) {
		term := startTerminal(t, s, "chat", "--profile", "p")
		term.expect(t, "Ctrl-D (or Ctrl-C twice) quits")
		term.expect(t, "> ")

		// The answer streams; a tool call shows its ✓ line.
		s.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("everything__echo", `{"message":"tty"}`)), llmtest.Text("Echoed tty for you."))
		term.send(t, "echo tty\n")
		term.expect(t, "✓ everything__echo")
		term.expect(t, "Echoed tty for you.")
		term.expect(t, "2 steps")
		term.expect(t, "> ")

		// An approval asked inline, answered "always".
		s.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("everything__get-sum", `{"a":4,"b":5}`)), llmtest.Text("That is 9."))
		term.send(t, "add 4 and 5\n")
		term.expect(t, "Allow everything__get-sum")
		term.send(t, "a\n")
		term.expect(t, "✓ everything__get-sum")
		term.expect(t, "That is 9.")
		term.expect(t, "> ")

		// Ctrl-C during a slow turn cancels it, and the prompt comes back.
		s.llm.Enqueue(llmtest.Slow(llmtest.Text("one two three four five six seven eight nine ten"), 400*time.Millisecond))
		term.send(t, "count slowly\n")
		term.expect(t, "one ")
		term.send(t, "\x03")
		term.expect(t, "cancelling the turn")
		term.expect(t, "turn ended: cancelled")
		term.expect(t, "> ")

		// Ctrl-D at the prompt quits.
		term.send(t, "\x04")
		if code := term.wait(t, 10*time.Second); code != 0 {
			t.Fatalf("mcpbus chat exited %d:\n%s", code, term.output())
		}
		id := convLine.FindStringSubmatch(term.output())
		if id == nil {
			t.Fatalf("no conversation id printed:\n%s", term.output())
		}
		r := s.must(t, "", "chat", "history", id[1])
		if !strings.Contains(r.Stdout, "you: count slowly") || !strings.Contains(r.Stdout, "turn ended: cancelled") {
			t.Errorf("history of the terminal conversation:\n%s", r.Stdout)
		}

		// `mcpbus chat <id>` continues it (its profile kept), showing the
		// last messages first; Ctrl-C twice at the prompt quits.
		again := startTerminal(t, s, "chat", id[1])
		again.expect(t, "you: add 4 and 5")
		again.expect(t, "model: That is 9.")
		again.expect(t, "> ")
		s.llm.Enqueue(llmtest.Text("We counted, then stopped."))
		again.send(t, "what happened?\n")
		again.expect(t, "We counted, then stopped.")
		again.expect(t, "> ")
		if body := string(s.llm.Last().Body); !strings.Contains(body, "count slowly") {
			t.Errorf("the continued conversation lost its history: %s", body)
		}
		again.send(t, "\x03")
		again.expect(t, "Ctrl-C again or Ctrl-D to quit")
		again.send(t, "\x03")
		if code := again.wait(t, 10*time.Second); code != 0 {
			t.Fatalf("mcpbus chat exited %d after two Ctrl-C:\n%s", code, again.output())
		}
	})

	t.Run("a server's form answered in a terminal", func(t *testing.T) {
		s.must(t, "", "servers", "add", "tm", "--binary", testServer, "--enabled")
		waitCLIState(t, s.bin, s.url, "tm", model.StateRunning, 30*time.Second)
		term := startTerminal(t, s, "chat", "--profile", "p")
		term.expect(t, "> ")

		// Answered field by field; invalid values are asked again.
		s.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__ask", `{"message":"Who are you?"}`)), llmtest.Text("Nice to meet you."))
		term.send(t, "introduce me\n")
		term.expect(t, "tm__ask (server tm) asks: Who are you?")
		term.expect(t, "[a]nswer / [d]ecline / [c]ancel")
		term.send(t, "a\n")
		term.expect(t, "Age (integer, ≥ 0, ≤ 150): ")
		term.send(t, "old\n")
		term.expect(t, "Age: must be an integer")
		term.send(t, "200\n")
		term.expect(t, "Age: must be at most 150")
		term.send(t, "36\n")
		term.expect(t, "3) blue")
		term.expect(t, "Favourite colour (a number or a choice): ")
		term.send(t, "3\n")
		term.expect(t, "your name")
		term.expect(t, "name *: ")
		term.send(t, "\n")
		term.expect(t, "name is required")
		term.send(t, "Ada\n")
		term.expect(t, "input for tm__ask: accept")
		term.expect(t, "Nice to meet you.")
		term.expect(t, "> ")
		if body := string(s.llm.Last().Body); !strings.Contains(body, "hello Ada, age 36, colour blue") {
			t.Fatalf("the answer did not reach the server: %s", body)
		}

		// Declined at once.
		s.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("tm__ask", `{"message":"Who are you?"}`)), llmtest.Text("Fine, no name."))
		term.send(t, "again\n")
		term.expect(t, "[a]nswer / [d]ecline / [c]ancel")
		term.send(t, "d\n")
		term.expect(t, "input for tm__ask: decline")
		term.expect(t, "Fine, no name.")
		term.expect(t, "> ")
		if body := string(s.llm.Last().Body); !strings.Contains(body, "the user chose decline") {
			t.Fatalf("the server did not hear decline: %s", body)
		}
		// A form outside what the chat can show (the everything server's,
		// with multi-select arrays and titled enums) is declined with the reason.
		s.llm.Enqueue(llmtest.ToolCalls(llmtest.Call("everything__trigger-elicitation-request", `{}`)), llmtest.Text("It was declined."))
		term.send(t, "show me a big form\n")
		term.expect(t, "input for everything__trigger-elicitation-request: decline (the server's form is outside what the chat can show")
		term.expect(t, "It was declined.")
		term.expect(t, "> ")

		term.send(t, "\x04")
		if code := term.wait(t, 10*time.Second); code != 0 {
			t.Fatalf("mcpbus chat exited %d:\n%s", code, term.output())
		}
	})
}

// terminal is a command run in a pseudo-terminal: what it writes is
// collected so a test can wait for text to appear.
type terminal struct {
	cmd  *exec.Cmd
	pty  *os.File
	mu   sync.Mutex
	buf  strings.Builder
	seen int // expect searches after this offset
	done chan error
}

func startTerminal(t *testing.T, s *chatStack, args ...string) *terminal {
	t.Helper()
	c := cliFor(s.bin, s.url)
	c.Env = clitest.Env("TERM=xterm")
	cmd := c.Command(context.Background(), args...)
	// Its own session with the pty as controlling terminal: Ctrl-C written
	// to the pty is a SIGINT from the line discipline, as for a person.
	f, err := pty.StartWithAttrs(cmd, &pty.Winsize{Rows: 40, Cols: 120}, &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL})
	if err != nil {
		t.Fatalf("starting mcpbus in a pty: %v", err)
	}
	term := &terminal{cmd: cmd, pty: f, done: make(chan error, 1)}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := f.Read(b)
			term.mu.Lock()
			term.buf.Write(b[:n])
			term.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() { term.done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-term.done:
			term.done <- err
		default:
			_ = cmd.Process.Kill()
		}
		_ = f.Close()
		if t.Failed() {
			t.Logf("terminal output:\n%s", term.output())
		}
	})
	return term
}

func (term *terminal) output() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.buf.String()
}

// expect waits for text to appear after what the last expect matched.
func (term *terminal) expect(t *testing.T, text string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		term.mu.Lock()
		out := term.buf.String()
		i := strings.Index(out[term.seen:], text)
		if i >= 0 {
			term.seen += i + len(text)
		}
		term.mu.Unlock()
		if i >= 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%q did not appear in the terminal; after the last match:\n%s", text, term.output()[term.seen:])
}

// waitNoEcho waits until the program has turned the terminal's echo off (a
// hidden prompt): typed before that, a secret would be echoed by the tty
// itself. On Linux the master reads the pair's shared termios.
func (term *terminal) waitNoEcho(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		tio, err := unix.IoctlGetTermios(int(term.pty.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatalf("reading the terminal's settings: %v", err)
		}
		if tio.Lflag&unix.ECHO == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the terminal's echo was never turned off")
}

func (term *terminal) send(t *testing.T, s string) {
	t.Helper()
	if _, err := term.pty.WriteString(s); err != nil {
		t.Fatalf("writing to the pty: %v", err)
	}
}

// wait returns the exit code once the command ends.
func (term *terminal) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case err := <-term.done:
		term.done <- err
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("the command did not exit within %s", within)
		return -1
	}
}
