package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUsageErrorsFollowTheContract: every usage mistake (an unknown flag or
// command, a bad flag value, a wrong argument count) exits 1 before
// anything connects, as a VALIDATION_ERROR naming what was wrong: with
// --json the contract on stdout, even when --json follows the bad flag,
// else one "error: CODE: message (field F)" line. An unknown subcommand of
// a parent (mcpbus servers rmm) printed its help and exited 0.
func TestUsageErrorsFollowTheContract(t *testing.T) {
	cases := []struct {
		args         []string
		field, words string
	}{
		{[]string{"status", "--bogus"}, "bogus", "unknown flag: --bogus"},
		{[]string{"call", "-x", "a.b"}, "x", "unknown shorthand flag"},
		{[]string{"status", "--timeout", "soon"}, "timeout", `invalid duration "soon"`},
		{[]string{"call", "a.b", "{}", "--timeout", "0"}, "timeout", "--timeout must be positive"},
		{[]string{"servers", "list", "--timeout=-1s"}, "timeout", "--timeout must be positive"},
		{[]string{"call", "a.b", "--progress=maybe"}, "progress", `invalid argument "maybe"`},
		{[]string{"servers", "get"}, "args", "accepts 1 arg(s), received 0"},
		{[]string{"call", "a.b", "{}", "extra"}, "args", "received 3"},
		{[]string{"servers", "lst", "x"}, "command", `unknown command "lst" for "mcpbus servers" (did you mean`},
		{[]string{"tasks", "rn"}, "command", `unknown command "rn"`},
		{[]string{"nosuchcmd"}, "command", `unknown command "nosuchcmd" for "mcpbus"`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			// Nothing listens on port 1: a command that got past its usage
			// check would fail on NATS instead.
			base := append([]string{"--nats", "nats://127.0.0.1:1"}, c.args...)
			var out, errOut bytes.Buffer
			start := time.Now()
			code := Main(append(base, "--json"), strings.NewReader(""), &out, &errOut)
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %s", took)
			}
			var e struct{ Code, Message, Field string }
			if code != 1 || json.Unmarshal(out.Bytes(), &e) != nil || e.Code != "VALIDATION_ERROR" || e.Field != c.field || !strings.Contains(e.Message, c.words) {
				t.Errorf("--json: exit %d, stdout %q, stderr %q; want exit 1 and VALIDATION_ERROR %q on field %s", code, out.String(), errOut.String(), c.words, c.field)
			}
			out.Reset()
			errOut.Reset()
			code = Main(base, strings.NewReader(""), &out, &errOut)
			line := strings.TrimSuffix(errOut.String(), "\n")
			if code != 1 || out.Len() != 0 || strings.Contains(line, "\n") || !strings.HasPrefix(line, "error: VALIDATION_ERROR: ") ||
				!strings.Contains(line, c.words) || !strings.HasSuffix(line, "(field "+c.field+")") {
				t.Errorf("text: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
			}
		})
	}
	// A parent alone still shows its help.
	var out bytes.Buffer
	if code := Main([]string{"servers"}, strings.NewReader(""), &out, &out); code != 0 || !strings.Contains(out.String(), "Available Commands") {
		t.Errorf("mcpbus servers: exit %d, %q", code, out.String())
	}
}

// TestToolArgumentsCheckedFirst: call and tasks run refuse arguments that
// are not a JSON object, or "-" with nothing on stdin, as a VALIDATION_ERROR
// on "arguments" before they connect: a typo is not reported as a bus that
// cannot be reached, and an empty pipe calls nothing (it called the tool
// without arguments).
func TestToolArgumentsCheckedFirst(t *testing.T) {
	for _, verb := range [][]string{{"call"}, {"tasks", "run"}} {
		for _, c := range []struct {
			args       []string
			stdin, msg string
		}{
			{[]string{"{"}, "", "must be a JSON object"},
			{[]string{"[1]"}, "", "must be a JSON object"},
			{[]string{"null"}, "", "must be a JSON object"},
			{[]string{"-"}, "", "no arguments on stdin"},
			{[]string{"-"}, " \n", "no arguments on stdin"},
			{[]string{"-"}, `{"a":`, "must be a JSON object"},
		} {
			args := append(append([]string{"--nats", "nats://127.0.0.1:1", "--json"}, verb...), append([]string{"s.t"}, c.args...)...)
			var out, errOut bytes.Buffer
			code := Main(args, strings.NewReader(c.stdin), &out, &errOut)
			var e struct{ Code, Message, Field string }
			if code != 1 || json.Unmarshal(out.Bytes(), &e) != nil || e.Code != "VALIDATION_ERROR" || e.Field != "arguments" || !strings.Contains(e.Message, c.msg) {
				t.Errorf("%v with stdin %q: exit %d, stdout %q, stderr %q", args, c.stdin, code, out.String(), errOut.String())
			}
		}
		// Good arguments get as far as the bus.
		var out bytes.Buffer
		args := append(append([]string{"--nats", "nats://127.0.0.1:1", "--json"}, verb...), "s.t", "-")
		if code := Main(args, strings.NewReader(`{"a":1}`), &out, io.Discard); code != 1 || !strings.Contains(out.String(), "SERVICE_UNAVAILABLE") {
			t.Errorf("%v: exit %d, %q", args, code, out.String())
		}
	}
}

// TestAuditFileErrorsSayWhy: a file given to audit verify that cannot be
// read or parsed is a VALIDATION_ERROR on its flag that says why: the
// message was the flag's name alone ("--keys"), the cause being dropped
// from the contract.
func TestAuditFileErrorsSayWhy(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.json")
	notJSON := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(notJSON, []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"keys", "anchor", "bundle"} {
		for _, file := range []string{missing, notJSON} {
			var out bytes.Buffer
			code := Main([]string{"audit", "verify", "--json", "--nats", "nats://127.0.0.1:1", "--" + flag, file}, strings.NewReader(""), &out, io.Discard)
			var e struct{ Code, Message, Field string }
			if code != 1 || json.Unmarshal(out.Bytes(), &e) != nil || e.Code != "VALIDATION_ERROR" || e.Field != flag || len(e.Message) <= len("--"+flag+": ") {
				t.Errorf("--%s %s: exit %d, %q", flag, file, code, out.String())
			}
		}
	}
}

// TestApprovalRulesFileCheckedFirst: approvals rules --file with a file
// that does not exist or is not JSON is a VALIDATION_ERROR on "file" that
// says why, before anything connects (it was SERVICE_UNAVAILABLE without a
// bus, and a bare Go error without a field with one).
func TestApprovalRulesFileCheckedFirst(t *testing.T) {
	notJSON := filepath.Join(t.TempDir(), "rules.json")
	if err := os.WriteFile(notJSON, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{filepath.Join(t.TempDir(), "missing.json"): "no such file", notJSON: "is not approval rules"} {
		var out bytes.Buffer
		code := Main([]string{"approvals", "rules", "--json", "--nats", "nats://127.0.0.1:1", "--file", file}, strings.NewReader(""), &out, io.Discard)
		var e struct{ Code, Message, Field string }
		if code != 1 || json.Unmarshal(out.Bytes(), &e) != nil || e.Code != "VALIDATION_ERROR" || e.Field != "file" || !strings.Contains(e.Message, want) {
			t.Errorf("--file %s: exit %d, %q", file, code, out.String())
		}
	}
}
