package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// A tool's own failure (isError) prints its message and exits 1 without a
// bus error code: it used to end in "error: SERVICE_UNAVAILABLE", the code
// that tells callers to retry, for e.g. arguments that do not match the
// tool's schema.
func TestPrintResultToolError(t *testing.T) {
	var out, errb bytes.Buffer
	g := &globals{stdout: &out, stderr: &errb}
	res := json.RawMessage(`{"content":[{"type":"text","text":"arguments do not match the input schema of echo"}],"isError":true}`)
	err := printResult(g, res)
	var exit silentExit
	if !errors.As(err, &exit) || exit != 1 {
		t.Fatalf("an isError result: %v, want exit 1", err)
	}
	if !strings.Contains(out.String(), "arguments do not match") {
		t.Errorf("stdout %q lacks the tool's message", out.String())
	}
	if e := errb.String(); !strings.Contains(e, "the tool reported an error") || strings.Contains(e, "SERVICE_UNAVAILABLE") {
		t.Errorf("stderr %q", e)
	}

	out.Reset()
	errb.Reset()
	if err := printResult(g, json.RawMessage(`{"content":[{"type":"text","text":"Echo: hi"}]}`)); err != nil || out.String() != "Echo: hi\n" || errb.Len() != 0 {
		t.Fatalf("a result: %v %q %q", err, out.String(), errb.String())
	}

	// --json: the result as it is, and the same exit status.
	out.Reset()
	g.json = true
	if err := printResult(g, res); !errors.As(err, &exit) || exit != 1 || out.String() != string(res)+"\n" {
		t.Fatalf("--json, an isError result: %v %q", err, out.String())
	}
	if err := printResult(g, json.RawMessage(`{"content":[]}`)); err != nil {
		t.Fatalf("--json, a result: %v", err)
	}
}

// A credential change that was made but whose restart then failed says so:
// `cred rm gh GITHUB_PERSONAL_ACCESS_TOKEN` removed a required secret and
// answered only "VALIDATION_ERROR: Missing required credentials", as if
// nothing had been removed.
func TestRestartFailedSaysTheChangeStands(t *testing.T) {
	err := restartFailed("gh", "removed", apierr.Invalid("env_vars.GITHUB_PERSONAL_ACCESS_TOKEN", "Missing required credentials"))
	e := apierr.From(err)
	if e.Code != apierr.Validation || e.Field != "env_vars.GITHUB_PERSONAL_ACCESS_TOKEN" ||
		e.Message != "the secrets were removed, but restarting gh failed: Missing required credentials" {
		t.Fatalf("got %+v", e)
	}
}

// `mcpbus call --progress` lines: no "/0" when the server gives no total, no
// trailing space when it gives no message.
func TestProgressLine(t *testing.T) {
	for _, c := range []struct {
		ev   model.ProgressEvent
		want string
	}{
		{model.ProgressEvent{Progress: 1, Total: 4}, "progress 1/4"},
		{model.ProgressEvent{Progress: 3}, "progress 3"},
		{model.ProgressEvent{Progress: 0.5, Total: 1, Message: "half"}, "progress 0.5/1 half"},
	} {
		if got := progressLine(c.ev); got != c.want {
			t.Errorf("%+v: %q, want %q", c.ev, got, c.want)
		}
	}
}
