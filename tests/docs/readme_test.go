package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// TestReadmeIsTheFrontPage keeps README.md short, with the two commands at
// its top as targets the Makefile has, and a link to every page of docs/.
func TestReadmeIsTheFrontPage(t *testing.T) {
	root := clitest.RepoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	if n := strings.Count(readme, "\n"); n > 250 {
		t.Errorf("README.md has %d lines; at most 250 (the rest belongs in docs/)", n)
	}
	top := strings.Join(strings.SplitN(readme, "\n", 8)[:7], "\n")
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"run", "test"} {
		if !strings.Contains(top, "make "+target+" ") {
			t.Errorf("README.md does not start with `make %s`", target)
		}
		if !regexp.MustCompile(`(?m)^` + target + `:`).Match(makefile) {
			t.Errorf("the Makefile has no %s target, which README.md gives", target)
		}
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(pages, filepath.Join(root, "docs", "cli", "mcpbus.md")) {
		rel, _ := filepath.Rel(root, p)
		if !strings.Contains(readme, "("+filepath.ToSlash(rel)+")") {
			t.Errorf("README.md's map of docs/ has no link to %s", rel)
		}
	}
}

// TestSecurityDocNamesExecPolicy: docs/security.md lists the runner's exec
// policy settings, the package types and what runners publish of it.
func TestSecurityDocNamesExecPolicy(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(clitest.RepoRoot(t), "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	want := []string{"--exec-types", "--exec-binary-prefixes", "--keyfile-prefixes", "--docker-mount-prefixes",
		"package.runtime_hint", "package.runtime_args", "package.identifier", "env_vars", "transport.url", "package.args"}
	want = append(want, model.ExecTypes...)
	for k := range (model.ExecPolicy{}).Metadata() {
		want = append(want, k)
	}
	for _, w := range want {
		if !strings.Contains(doc, "`"+w) {
			t.Errorf("docs/security.md does not name `%s`", w)
		}
	}
}
