package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/services/chat/conversation"
	"github.com/mcpbus/mcpbus/services/chat/results"
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
	defaults := []int64{bus.DefaultEventsMaxBytes, bus.DefaultAuditMaxBytes, conversation.DefaultMaxBytes, results.DefaultMaxBytes}
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
