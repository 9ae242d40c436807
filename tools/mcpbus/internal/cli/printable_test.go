package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// A hostile server's description or result cannot drive the operator's
// terminal: no escape, bell, C1 control or bidi override is printed as is.
func TestOneLineShowsNoControls(t *testing.T) {
	for _, in := range []string{
		"Adds numbers\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07", // OSC 52: set the clipboard
		"safe\x1b[2K\x1b[1Gevil",                             // erase the line, write over it
		"shown\x1b[8mhidden",                                 // concealed text
		"csi\u009b31m c1",                                    // 8-bit CSI
		"abc\u202eevil\u202c",                                // right-to-left override
		"del\x7f",
	} {
		out := oneLine(in, 200)
		if strings.ContainsFunc(out, unsafeRune) {
			t.Errorf("oneLine(%q) = %q: a control reaches the terminal", in, out)
		}
		if !strings.Contains(out, "\ufffd") {
			t.Errorf("oneLine(%q) = %q: the control is not shown", in, out)
		}
	}
	if got := oneLine("plain  text\n with\tspaces é", 200); got != "plain text with spaces é" {
		t.Errorf("plain text changed: %q", got)
	}
}

// An error's text, which may quote a server (its JSON-RPC error message, its
// start failure), and a call's progress lines are shown without controls
// too; an error keeps its line breaks.
func TestServerTextInErrorsAndProgressShowsNoControls(t *testing.T) {
	var out, errs strings.Builder
	g := &globals{stdout: &out, stderr: &errs}
	g.printError(apierr.Newf(apierr.Internal, "server evil answered the call of x with an error (-32000): boom\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07\nsecond line"))
	g.printError(apierr.Invalid("arguments\x1b[2K", "bad\x1b[8mhidden"))
	fmt.Fprintln(g.stderr, progressLine(model.ProgressEvent{Progress: 1, Total: 2, Message: "half\x1b[2K\x1b[1Gdone\u202e"}))
	_ = printResult(g, json.RawMessage(`{"content":[{"type":"image","mimeType":"image/png\u001b]52;c;eA==\u0007","data":""}]}`))
	for name, s := range map[string]string{"stderr": errs.String(), "stdout": out.String()} {
		if strings.ContainsFunc(strings.ReplaceAll(s, "\n", ""), unsafeRune) {
			t.Errorf("%s: a control reaches the terminal: %q", name, s)
		}
	}
	if !strings.Contains(errs.String(), "\nsecond line") {
		t.Errorf("the error's line break is gone: %q", errs.String())
	}
}

// oneLine shortens text at a character boundary: a cut inside a multi-byte
// character would print half of it (invalid UTF-8) to the terminal.
func TestOneLineCutsAtACharacter(t *testing.T) {
	for _, in := range []string{strings.Repeat("é", 40), "ab" + strings.Repeat("日本", 30), strings.Repeat("x", 58) + "🙂🙂"} {
		out := oneLine(in, 60)
		if !utf8.ValidString(out) || len(out) > 60+len("…") || !strings.HasSuffix(out, "…") {
			t.Errorf("oneLine(%q, 60) = %q (valid %v, %d bytes)", in, out, utf8.ValidString(out), len(out))
		}
	}
}
