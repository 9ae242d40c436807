package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// secretInArgv matches a shell command that hands a credential to a program
// as an argument: an Authorization or API-key header given on the command
// line (curl -H "Authorization: Bearer $KEY", the Inspector's --header), or
// a request body carrying an api_key. Any local user reads a running
// process's arguments in /proc/<pid>/cmdline, so for as long as the command
// runs (a `curl -N` event stream, the Inspector: minutes) the key is theirs.
// Headers read from a file or a process substitution (`-H @<(printf …)`,
// `--config <(printf …)`) stay out of the arguments: printf is a shell
// builtin, and `$(cat file)` passes only the file's name to cat.
var secretInArgv = []*regexp.Regexp{
	regexp.MustCompile(`(?i)(^|\s)(-H|--header)\s+["']?(Authorization|X-Api-Key|Api-Key)\s*:`),
	regexp.MustCompile(`(?i)(^|\s)(-d|--data[a-z-]*)\s+'[^']*"api_key"\s*:\s*"[^"]`),
}

// shellCommands are the commands of a markdown file's shell code blocks
// (sh, bash, shell, console), continuation lines joined, each with the line
// it starts on.
func shellCommands(t *testing.T, file string) map[int]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmds := map[int]string{}
	inShell, inCode := false, false
	cur, start := "", 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if fence := strings.TrimSpace(line); strings.HasPrefix(fence, "```") {
			if !inCode {
				lang := strings.TrimPrefix(fence, "```")
				inCode, inShell = true, lang == "sh" || lang == "bash" || lang == "shell" || lang == "console"
			} else {
				inCode, inShell = false, false
			}
			continue
		}
		if !inShell {
			continue
		}
		if cur == "" {
			start = n
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(line, " "), `\`); ok {
			cur += s + " "
			continue
		}
		cmds[start] = cur + line
		cur = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cmds
}

// TestDocsPutNoSecretInArguments: no command the documents show passes an
// API key or a model's key as a program argument, where every local user
// reads it (docs/security.md: "a secret on a command line is readable by
// every local user through /proc").
func TestDocsPutNoSecretInArguments(t *testing.T) {
	root := clitest.RepoRoot(t)
	checked := 0
	for _, file := range markdownFiles(t, root) {
		rel, _ := filepath.Rel(root, file)
		for n, cmd := range shellCommands(t, file) {
			checked++
			for _, re := range secretInArgv {
				if re.MatchString(cmd) {
					t.Errorf("%s:%d passes a secret as an argument, readable by every local user in /proc/<pid>/cmdline; read it from a file or a process substitution (-H @<(printf 'Authorization: Bearer %%s\\n' \"$KEY\")):\n\t%s", rel, n, cmd)
					break // one report a command
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("found %d shell commands in the documents; the code block parser no longer finds them", checked)
	}
}
