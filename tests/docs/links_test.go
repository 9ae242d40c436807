package docs

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// link is a markdown inline link or image: [text](target) or ![alt](target).
var link = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)

// markdownFiles are README.md and every .md file under docs/.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// prose is a markdown file's lines outside fenced code blocks, with inline
// code spans blanked: a link or a heading only counts there.
func prose(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			lines = append(lines, "")
			continue
		}
		if fenced {
			lines = append(lines, "")
			continue
		}
		lines = append(lines, blankCode(line))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// blankCode replaces the inside of `code spans` with spaces.
func blankCode(line string) string {
	b := []byte(line)
	in := false
	for i := range b {
		if b[i] == '`' {
			in = !in
			continue
		}
		if in {
			b[i] = ' '
		}
	}
	return string(b)
}

// anchors are the heading ids GitHub gives a file's headings: lower case,
// punctuation dropped but '-' and '_', spaces as '-', repeats numbered.
func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fenced || !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var slug strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r > 127:
				slug.WriteRune(r)
			}
		}
		id := slug.String()
		if n := seen[id]; n > 0 {
			out[fmt.Sprintf("%s-%d", id, n)] = true
		} else {
			out[id] = true
		}
		seen[id]++
	}
	return out
}

// TestDocsLinksResolve checks every relative link of README.md and docs/:
// its file exists, and its #heading is one of that file's headings.
func TestDocsLinksResolve(t *testing.T) {
	root := clitest.RepoRoot(t)
	checked := 0
	for _, file := range markdownFiles(t, root) {
		rel, _ := filepath.Rel(root, file)
		for n, line := range prose(t, file) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if u, err := url.Parse(target); err == nil && u.Scheme != "" {
					continue // http(s), mailto: not ours to check
				}
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				}
				checked++
				st, err := os.Stat(dest)
				if err != nil {
					t.Errorf("%s:%d: link %q: %v", rel, n+1, target, err)
					continue
				}
				if frag != "" && (st.IsDir() || !strings.HasSuffix(dest, ".md") || !anchors(t, dest)[frag]) {
					t.Errorf("%s:%d: link %q: no heading #%s in %s", rel, n+1, target, frag, path)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d relative links found: the link pattern no longer matches the docs", checked)
	}
}
