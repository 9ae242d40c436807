package cli

import (
	"bytes"
	"encoding/json"
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
