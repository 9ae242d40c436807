package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/schemaguard"
	"github.com/mcpbus/mcpbus/libs/secretscan/fingerprint"
	"github.com/mcpbus/mcpbus/services/gateway/rest"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// securityDocs are the documents whose controls these tests hold to the code.
var securityDocs = []string{"docs/security.md", "docs/principals.md"}

// testName is a test a document cites as the proof of a claim.
var testName = regexp.MustCompile("`(Test[A-Z][A-Za-z0-9_]*)`")

// TestSecurityDocsCiteRealTests: every test docs/security.md and
// docs/principals.md cite ("tested by `TestX`") is a test function of the
// repository, so a claim is not vouched for by a test that was renamed or
// removed.
func TestSecurityDocsCiteRealTests(t *testing.T) {
	root := clitest.RepoRoot(t)
	cited := map[string][]string{}
	for _, file := range securityDocs {
		for _, m := range testName.FindAllStringSubmatch(readDoc(t, file), -1) {
			cited[m[1]] = append(cited[m[1]], file)
		}
	}
	if len(cited) < 10 {
		t.Fatalf("the security documents cite %d tests; the pattern no longer finds them", len(cited))
	}
	defined := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllSubmatch(raw, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, files := range cited {
		if !defined[name] {
			t.Errorf("%s cite %s, which is no test of the repository", strings.Join(files, ", "), name)
		}
	}
}

var testFunc = regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(t \*testing\.T\)`)

// number reads a documented number ("16,384", "10,000", "120").
func number(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSecurityDocNumbers: the bounds and defaults docs/security.md and
// docs/principals.md state are those of the code.
func TestSecurityDocNumbers(t *testing.T) {
	docs := map[string]string{}
	for _, f := range securityDocs {
		docs[f] = readDoc(t, f)
	}
	for _, c := range []struct {
		file, pattern string
		want          []int64
	}{
		{"docs/security.md", `a rate at each runner \((\d+) requests a second,\s+bursts of (\d+)`,
			[]int64{int64(model.DefaultAgentRate.RPS), int64(model.DefaultAgentRate.Burst)}},
		{"docs/security.md", "`timeout_seconds` \\(default (\\d+), at most (\\d+)",
			[]int64{int64(model.DefaultApprovalTimeout.Seconds()), int64(model.MaxApprovalTimeout.Seconds())}},
		{"docs/security.md", `At most\s+([\d,]+) fingerprints`, []int64{model.MaxFingerprints}},
		{"docs/security.md", `Values of (\d+) to (\d+) bytes are held`, []int64{fingerprint.MinLen, fingerprint.MaxLen}},
		{"docs/security.md", "`Mcp-Request-Id` at most (\\d+) bytes and its tool token (\\d+)",
			[]int64{bus.MaxRequestID, model.MaxTokenLen}},
		{"docs/security.md", `over ([\d,]+) subschemas`, []int64{schemaguard.MaxSubschemas}},
		{"docs/security.md", `\(default ([\d,]+), at most\s+([\d,]+)\) from stream sequence`,
			[]int64{rest.DefaultAuditPage, rest.MaxAuditPage}},
		{"docs/security.md", `at most (\d+) headers`, []int64{model.MaxPrincipalHeaders}},
	} {
		m := regexp.MustCompile(c.pattern).FindStringSubmatch(docs[c.file])
		if m == nil {
			t.Errorf("%s no longer states %s", c.file, c.pattern)
			continue
		}
		for i, want := range c.want {
			if got := number(t, m[i+1]); got != want {
				t.Errorf("%s: %q says %d where the code has %d", c.file, m[0], got, want)
			}
		}
	}
}

// TestSecurityDocSecretScanDefaults: the defaults of secret_scan the table
// of docs/security.md gives are those of model.SecretsPolicy.
func TestSecurityDocSecretScanDefaults(t *testing.T) {
	doc := readDoc(t, "docs/security.md")
	var zero model.SecretsPolicy
	for field, want := range map[string]string{"arguments": zero.ArgumentsPolicy(), "results": zero.ResultsPolicy()} {
		m := regexp.MustCompile("`secret_scan\\." + field + "` \\(default `(\\w+)`\\)").FindStringSubmatch(doc)
		if m == nil {
			t.Errorf("docs/security.md no longer gives the default of secret_scan.%s", field)
			continue
		}
		if m[1] != want {
			t.Errorf("docs/security.md: secret_scan.%s defaults to %s, not %s", field, want, m[1])
		}
	}
}

// TestSecurityDocDockerOptions: the `docker run` options the exec policy
// table of docs/security.md allows a docker package are accepted
// (model.ExecPolicy.RefuseDockerArgs), and those it says are never allowed
// are refused, with or without a value; likewise the npx options and the
// environment variable names it denies.
func TestSecurityDocDockerOptions(t *testing.T) {
	doc := readDoc(t, "docs/security.md")
	row := func(field string) string {
		t.Helper()
		for _, line := range strings.Split(doc, "\n") {
			if strings.HasPrefix(line, "| `"+field+"`") {
				return line
			}
		}
		t.Fatalf("docs/security.md has no row for %s in its exec policy table", field)
		return ""
	}
	code := regexp.MustCompile("`([^`]+)`")
	items := func(s string) []string {
		var out []string
		for _, m := range code.FindAllStringSubmatch(s, -1) {
			out = append(out, m[1])
		}
		return out
	}
	args := row("package.runtime_args")
	npx, docker, ok := strings.Cut(args, "docker:")
	if !ok {
		t.Fatal("the runtime_args row no longer names docker's options")
	}
	allowed, never, ok := strings.Cut(docker, "never")
	if !ok {
		t.Fatal("the runtime_args row no longer says which docker options are never allowed")
	}
	var p model.ExecPolicy
	// Values that pass the options' own checks.
	values := map[string]string{"-v": "data:/data", "--volume": "data:/data", "--mount": "type=volume,source=v,target=/v",
		"--network": "none", "--security-opt": "no-new-privileges", "--tmpfs": "/t"}
	accepted := func(opt string) bool {
		if p.RefuseDockerArgs([]string{opt}, "r") == nil {
			return true
		}
		v := values[opt]
		if v == "" {
			v = "1"
		}
		return p.RefuseDockerArgs([]string{opt, v}, "r") == nil
	}
	n := 0
	for _, it := range items(allowed) {
		if !strings.HasPrefix(it, "-") {
			continue // a value the prose names (`host`, `container:`)
		}
		if opt, val, spaced := strings.Cut(it, " "); spaced { // `--security-opt no-new-privileges`
			if e := p.RefuseDockerArgs([]string{opt, val}, "r"); e != nil {
				t.Errorf("docs/security.md allows docker run %s, but it is refused: %v", it, e)
			}
			n++
			continue
		}
		if !accepted(it) {
			t.Errorf("docs/security.md allows docker run %s, but it is refused", it)
		}
		n++
	}
	if n < 15 {
		t.Errorf("found %d allowed docker options in the runtime_args row", n)
	}
	for _, bad := range []string{"host", "container:x"} {
		if p.RefuseDockerArgs([]string{"--network", bad}, "r") == nil {
			t.Errorf("docker run --network %s is allowed", bad)
		}
	}
	for _, it := range items(never) {
		for _, opt := range strings.Split(it, "/") {
			for _, try := range [][]string{{opt}, {opt, "host"}, {opt + "=host"}} {
				if p.RefuseDockerArgs(try, "r") == nil {
					t.Errorf("docs/security.md says docker run %s is never allowed, but %q is", it, try)
				}
			}
		}
	}
	npm := func(runtimeArgs ...string) *model.McpConfig {
		return &model.McpConfig{Name: "x", Package: model.Package{Type: model.PackageNPM, Identifier: "pkg", RuntimeArgs: runtimeArgs},
			Transport: model.Transport{Type: model.TransportStdio}}
	}
	for _, it := range items(npx) {
		if !strings.HasPrefix(it, "-") {
			continue
		}
		if e := p.Refuse(npm(it), "r"); e != nil {
			t.Errorf("docs/security.md allows the npx option %s, but it is refused: %v", it, e)
		}
	}
	envRow := row("env_vars")
	for _, it := range items(envRow)[1:] { // the first is the field itself
		name := strings.TrimSuffix(it, "*") + strings.Repeat("X", strings.Count(it, "*"))
		if !model.EnvNameDenied(name) {
			t.Errorf("docs/security.md denies the environment variable %s, but %s is allowed", it, name)
		}
	}
}
