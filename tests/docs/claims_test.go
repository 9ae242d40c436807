package docs

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/services/chat/conversation"
	"github.com/mcpbus/mcpbus/services/chat/results"
	"github.com/mcpbus/mcpbus/services/runner/runner"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// readDoc is a file of the repository as text.
func readDoc(t *testing.T, rel string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(clitest.RepoRoot(t), filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// freeDisk is a statement of how much free disk `mcpbus up` needs before it
// makes its streams smaller: "~10 GiB of free disk".
var freeDisk = regexp.MustCompile(`~(\d+(?:\.\d+)?) (GB|GiB) of free disk`)

// TestSmallDiskThreshold: the free disk below which README.md and
// docs/operating.md say `mcpbus up` scales its streams down is the one
// bus.Budget gives the streams' default bounds on a NATS server offering
// 75% of the free disk (nats-server's default): scaled 10% below it, not
// 10% above.
func TestSmallDiskThreshold(t *testing.T) {
	defaults := []int64{bus.DefaultEventsMaxBytes, bus.DefaultAuditMaxBytes, conversation.DefaultMaxBytes, results.DefaultMaxBytes, runner.DefaultTaskMaxBytes}
	scaled := func(free float64) bool {
		_, s := bus.Budget(int64(free*3/4), defaults...)
		return s
	}
	for _, file := range []string{"README.md", "docs/operating.md"} {
		ms := freeDisk.FindAllStringSubmatch(readDoc(t, file), -1)
		if len(ms) == 0 {
			t.Errorf("%s no longer says how much free disk `mcpbus up` needs (~N GiB of free disk)", file)
		}
		for _, m := range ms {
			n, err := strconv.ParseFloat(m[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			unit := float64(1 << 30)
			if m[2] == "GB" {
				unit = 1e9
			}
			free := n * unit
			if !scaled(free*0.9) || scaled(free*1.1) {
				t.Errorf("%s: %q: the streams' default bounds are scaled below %.1f GiB of free disk, not there",
					file, m[0], threshold(scaled)/(1<<30))
			}
		}
	}
}

// threshold is the free disk (bytes) from which scaled is false, to 1 MiB.
func threshold(scaled func(float64) bool) float64 {
	lo, hi := 0.0, float64(1<<40)
	for hi-lo > 1<<20 {
		mid := (lo + hi) / 2
		if scaled(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// TestGatewayDocResourceNotFoundCode: docs/gateway.md gives the JSON-RPC
// code the gateway answers a resources/subscribe or read of a URI the key
// cannot read with, which is go-sdk's (mcp.ResourceNotFoundError).
func TestGatewayDocResourceNotFoundCode(t *testing.T) {
	err := mcp.ResourceNotFoundError("x")
	je, ok := err.(*jsonrpc.Error)
	if !ok {
		t.Fatalf("mcp.ResourceNotFoundError is a %T, not a *jsonrpc.Error", err)
	}
	doc := readDoc(t, "docs/gateway.md")
	want := fmt.Sprintf("`%d` \"Resource not found\"", je.Code)
	if !strings.Contains(doc, want) {
		t.Errorf("docs/gateway.md does not give go-sdk's resource-not-found answer %s", want)
	}
	if c := fmt.Sprint(je.Code); c != "-32002" && strings.Contains(doc, "-32002") {
		t.Errorf("docs/gateway.md names -32002, but a resource not found is %s", c)
	}
}

// TestOperatingSplitExampleHasIdentities: every `mcpbus serve <service>`
// of docs/operating.md's example of one service per process connects with
// an identity, and its nats-server runs the permission table: a service
// refuses a NATS server that requires no authentication (without
// --insecure-bus), so an example without them does not start.
func TestOperatingSplitExampleHasIdentities(t *testing.T) {
	doc := readDoc(t, "docs/operating.md")
	_, section, ok := strings.Cut(doc, "\n## One service per process\n")
	if !ok {
		t.Fatal("docs/operating.md has no section One service per process")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatal("the section One service per process has no sh example")
	}
	block, _, _ = strings.Cut(block, "```")
	serves := 0
	natsServer := false
	for _, line := range strings.Split(block, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && strings.HasSuffix(f[0], "mcpbus") && f[1] == "serve" {
			serves++
			if !strings.Contains(line, "--nats-nkey ") && !strings.Contains(line, "--nats-creds ") && !strings.Contains(line, "--insecure-bus") {
				t.Errorf("docs/operating.md: %q has no identity (--nats-nkey or --nats-creds): the service refuses a bus without authentication", line)
			}
		}
		if strings.Contains(line, "nats-server ") {
			natsServer = true
			if !strings.Contains(line, "nats.conf") {
				t.Errorf("docs/operating.md: %q runs nats-server without deploy/nats/nats.conf, which includes the permission table (auth.conf)", line)
			}
		}
	}
	if serves < 5 || !natsServer {
		t.Errorf("docs/operating.md's example of one service per process starts %d services and nats-server %v: the test no longer reads it", serves, natsServer)
	}
	if !strings.Contains(readDoc(t, "deploy/nats/nats.conf"), `include "auth.conf"`) {
		t.Error(`deploy/nats/nats.conf no longer includes "auth.conf", which the example relies on`)
	}
}

// upFlag is one option of `mcpbus up` as docs/cli/mcpbus_up.md (generated
// from the command, kept current by a test of tools/mcpbus) lists it.
type upFlag struct {
	env, def string
	hasDef   bool
}

var (
	upOption  = regexp.MustCompile(`^\s+--([a-z0-9-]+)\s.*?\(env (MCPBUS_[A-Z0-9_]+)\)(?: \(default (.*)\))?$`)
	backtick  = regexp.MustCompile("`([^`]*)`")
	docParens = regexp.MustCompile(`\s*\([^)]*\)$`)
)

// upFlags reads the options of `mcpbus up` from docs/cli/mcpbus_up.md.
func upFlags(t *testing.T) map[string]upFlag {
	t.Helper()
	flags := map[string]upFlag{}
	for _, line := range strings.Split(readDoc(t, "docs/cli/mcpbus_up.md"), "\n") {
		if m := upOption.FindStringSubmatch(line); m != nil {
			flags[m[1]] = upFlag{env: m[2], def: m[3], hasDef: strings.Contains(line, "(default "+m[3]+")") && m[3] != ""}
		}
	}
	if len(flags) < 40 {
		t.Fatalf("read %d options of mcpbus up from docs/cli/mcpbus_up.md: its format changed", len(flags))
	}
	return flags
}

// sameDefault reports whether a default as docs/operating.md writes it
// (60s, 1 MiB, none, 0 (off), registry.modelcontextprotocol.io) is the one
// the command has, and whether the doc's value could be compared at all
// (a description such as "random" cannot).
func sameDefault(doc string, f upFlag) (same, comparable bool) {
	doc = strings.TrimSpace(docParens.ReplaceAllString(strings.Trim(doc, "` "), ""))
	doc = strings.Trim(doc, "`")
	cli := strings.Trim(f.def, `"`)
	if !f.hasDef {
		cli = ""
	}
	switch {
	case doc == "none" || doc == "":
		return cli == "" || cli == "[]", true
	case doc == "false" || doc == "true":
		return cli == doc || (doc == "false" && cli == ""), true
	}
	if d, err := time.ParseDuration(doc); err == nil {
		c, err := time.ParseDuration(cmp.Or(cli, "0s"))
		return err == nil && c == d, true
	}
	if n, err := strconv.ParseFloat(doc, 64); err == nil {
		c, err := strconv.ParseFloat(cmp.Or(cli, "0"), 64)
		return err == nil && c == n, true
	}
	if n, ok := strings.CutSuffix(doc, " MiB"); ok {
		v, err := strconv.ParseFloat(n, 64)
		c, cerr := strconv.ParseFloat(cli, 64)
		return err == nil && cerr == nil && c == v*(1<<20), true
	}
	if strings.ContainsAny(doc, " %") || cli == "" {
		return false, false // a description: "random", "75% of the data dir's free disk"
	}
	if strings.Contains(cli, "://") {
		_, cli, _ = strings.Cut(cli, "://")
	}
	return filepath.Clean(doc) == filepath.Clean(cli) || strings.Trim(cli, "[]") == doc, true
}

// TestOperatingSettingsTable: every flag of docs/operating.md's table of
// `mcpbus up` settings is a flag of `mcpbus up`, the env vars it names are
// those flags' own, and each default it gives is the flag's.
func TestOperatingSettingsTable(t *testing.T) {
	flags := upFlags(t)
	doc := readDoc(t, "docs/operating.md")
	_, table, ok := strings.Cut(doc, "| flag | env | default | |\n")
	if !ok {
		t.Fatal("docs/operating.md has no settings table (| flag | env | default | |)")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	rows, compared := 0, 0
	for _, row := range strings.Split(table, "\n")[1:] {
		cells := strings.Split(strings.Trim(row, "|"), " | ")
		if len(cells) < 3 {
			t.Errorf("docs/operating.md settings table: row %q has %d cells", row, len(cells))
			continue
		}
		rows++
		var names []string
		for _, m := range backtick.FindAllStringSubmatch(cells[0], -1) {
			name, ok := strings.CutPrefix(m[1], "--")
			if !ok {
				continue
			}
			if _, ok := flags[name]; !ok {
				t.Errorf("docs/operating.md settings table: `--%s` is not a flag of mcpbus up", name)
				continue
			}
			names = append(names, name)
		}
		for _, m := range backtick.FindAllStringSubmatch(cells[1], -1) {
			env := m[1]
			prefix, partial := strings.CutSuffix(env, "…")
			found := false
			for _, n := range names {
				found = found || flags[n].env == env || (partial && strings.HasPrefix(flags[n].env, prefix))
			}
			if !found {
				t.Errorf("docs/operating.md settings table: %s is not the env var of %v", env, names)
			}
		}
		defs := strings.Split(cells[2], ", ")
		if len(defs) != len(names) {
			continue // one description for several flags
		}
		for i, n := range names {
			same, comparable := sameDefault(defs[i], flags[n])
			if !comparable {
				continue
			}
			compared++
			if !same {
				t.Errorf("docs/operating.md settings table: --%s defaults to %q, not %q", n, flags[n].def, defs[i])
			}
		}
	}
	t.Logf("%d rows, %d defaults compared", rows, compared)
	if rows < 30 || compared < 30 {
		t.Errorf("read %d rows of docs/operating.md's settings table and compared %d defaults: its format changed", rows, compared)
	}
}
