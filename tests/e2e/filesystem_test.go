package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// TestFilesystem runs the published server-filesystem with a root directory as
// its argument: it lists and reads a file inside the root and refuses a path
// outside it.
func TestFilesystem(t *testing.T) {
	t.Parallel()
	bin := npmBin(t, "mcp-server-filesystem")
	root := t.TempDir()
	const content = "hello from mcpbus e2e\n"
	file := filepath.Join(root, "note.txt")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("not for the server"), 0o600); err != nil {
		t.Fatal(err)
	}

	e := startBus(t)
	e.Put(t, runnertest.Binary("files", bin, root))
	st := e.WaitState(t, "files", model.StateRunning, 30*time.Second)

	// Use the tool names the server itself reports.
	for _, want := range []string{"list_directory", "read_text_file"} {
		if !slices.Contains(st.Tools, want) {
			t.Fatalf("server-filesystem tools are %v, want %q among them", st.Tools, want)
		}
	}
	tools, err := e.Client.ListTools(ctxFor(t, 10*time.Second), "files")
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools {
		if tool.Tool == "read_text_file" || tool.Tool == "list_directory" {
			checkSchema(t, tool, "path")
		}
	}

	args := func(path string) string {
		b, _ := json.Marshal(map[string]string{"path": path})
		return string(b)
	}
	if got := call(t, e, "files", "list_directory", args(root)); !strings.Contains(got, "note.txt") {
		t.Errorf("list_directory %s returned %q, want note.txt in it", root, got)
	}
	if got := call(t, e, "files", "read_text_file", args(file)); got != content && got != strings.TrimSuffix(content, "\n") {
		t.Errorf("read_text_file returned %q, want %q", got, content)
	}

	// Outside the allowed root: a tool error (isError) or a bus error, never the content.
	raw, err := e.Client.Call(ctxFor(t, 10*time.Second), "files", "read_text_file", json.RawMessage(args(outside)), nil)
	if err == nil {
		text, isErr := resultText(t, raw)
		if !isErr {
			t.Fatalf("reading %s outside the root succeeded: %q", outside, text)
		}
		if strings.Contains(text, "not for the server") {
			t.Fatalf("the error leaks the file's content: %q", text)
		}
		if !strings.Contains(strings.ToLower(text), "denied") && !strings.Contains(strings.ToLower(text), "outside") {
			t.Errorf("tool error does not say access is denied: %q", text)
		}
		t.Logf("outside the root: tool error %q", text)
	} else {
		t.Logf("outside the root: %v", err)
	}
}
