package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// Scale beyond one process: one server run by 1, 2 and 3 runners at once
// (runtime.replicas), each runner a process of its own, sharing the calls
// through the server's queue group, with a tool that costs CPU per call.
//
// The Go test server (libs/testmcp) has no tool that only burns CPU. Two
// existing tools stand in:
//
//   - node-gzip: server-everything's gzip-file-as-resource (tests/npm,
//     `make npm-deps`), which fetches a file from a loopback HTTP server of
//     this process and gzips it with node's gzipSync: the CPU is in the MCP
//     server, the wire carries a short request and a resource link, and the
//     server is single-threaded (node's event loop), like most MCP servers.
//     One replica can use one core at most; a second can use the other.
//   - go-large: the Go test server's large tool (a 64 KiB text). It costs
//     CPU in every process the result crosses (the test server encodes it,
//     the runner's go-sdk session decodes it and the runner encodes it again,
//     NATS copies it), and Go spreads that over both cores from one replica:
//     the contrast case.

// replicaCallers is how many concurrent callers the replicas benchmark has.
const replicaCallers = 8

// gzipBlobBytes is the size of the file the gzip tool compresses.
const gzipBlobBytes = 256 << 10

// largeArgs asks the large tool for 64 KiB.
var largeArgs = json.RawMessage(`{"bytes":65536}`)

// everythingBin is server-everything's command under tests/npm; it fails the
// benchmark when it is not installed.
func everythingBin(b *testing.B) string {
	b.Helper()
	_, self, _, _ := runtime.Caller(0)
	bin := filepath.Join(filepath.Dir(self), "..", "npm", "node_modules", ".bin", "mcp-server-everything")
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("server-everything is not installed (%v): run `make npm-deps`", err)
	}
	return bin
}

// serveBlob serves gzipBlobBytes of text (random words of a small alphabet,
// which gzip shrinks ~2:1) on a loopback port and returns its URL.
func serveBlob(b *testing.B) string {
	b.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	blob := make([]byte, gzipBlobBytes)
	for i := range blob {
		if r.IntN(7) == 0 {
			blob[i] = ' '
		} else {
			blob[i] = byte('a' + r.IntN(16))
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(blob)
	})}
	go func() { _ = hs.Serve(ln) }()
	b.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String() + "/blob.txt"
}

// directEverything is the direct baseline for server-everything: a go-sdk
// stdio session to a server of its own, with the runner's client
// capabilities (none: else it asks for roots/list), calling tool.
func directEverything(b *testing.B, bin, tool string, args json.RawMessage) caller {
	b.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	// server-everything does not exit on EOF: SIGTERM 100 ms after it.
	tr := &mcp.CommandTransport{Command: exec.Command(bin), TerminateDuration: 100 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, tr, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sess.Close() })
	return func(ctx context.Context) error {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %+v", res.Content)
		}
		return err
	}
}

// BenchmarkRunnerReplicas: a one-node NATS in this process, three
// mcpbus-runner processes, and for each tool three servers with
// runtime.replicas 1, 2 and 3 (the one with 3 runs on every runner).
// <tool>/replicas=N calls the server with N replicas from replicaCallers
// callers on one TCP connection (libs/client), paired in the same rounds with
// the direct baseline (a go-sdk stdio session to one server process of its
// own, as many callers) and, for N > 1, with the server of one replica
// (p50/1replica, rate/1replica):
//
//	go test -run '^$' -bench RunnerReplicas -benchtime 600x -count 3 ./bench/
func BenchmarkRunnerReplicas(b *testing.B) {
	bin, cleanup, err := runnertest.BuildRunner()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cleanup)
	everything := everythingBin(b)
	gzipArgs, err := json.Marshal(map[string]string{"name": "bench.txt.gz", "data": serveBlob(b), "outputType": "resourceLink"})
	if err != nil {
		b.Fatal(err)
	}
	e := runnertest.StartClusterEnv(b, 1)
	for i := 1; i <= 3; i++ {
		e.StartRunner(b, bin, fmt.Sprintf("r%d", i), 0, "--log-level", "warn")
	}
	type subject struct {
		name, tool string
		args       json.RawMessage
		cmd        string
		direct     func(b *testing.B) caller
	}
	subjects := []subject{
		{"node-gzip", "gzip-file-as-resource", gzipArgs, everything,
			func(b *testing.B) caller { return directEverything(b, everything, "gzip-file-as-resource", gzipArgs) }},
		{"go-large", "large", largeArgs, testServer,
			func(b *testing.B) caller { return directTool(b, "large", largeArgs) }},
	}
	// The runners place leases up to their fair share each. With the servers
	// of 3 replicas placed first, then those of 2, then of 1, every replica
	// finds a runner with room that does not run it yet, so the load stays
	// even (in another order the only runner without a replica may be at its
	// share; it then takes the replica above its share rather than leave it
	// unplaced).
	deadline := time.Now().Add(90 * time.Second)
	for n := 3; n >= 1; n-- {
		for _, s := range subjects {
			cfg := runnertest.Binary(fmt.Sprintf("%s-%d", s.name, n), s.cmd)
			cfg.Runtime.Eager, cfg.Runtime.Replicas = true, n
			e.Put(b, cfg)
		}
		for _, s := range subjects {
			slug := fmt.Sprintf("%s-%d", s.name, n)
			for {
				st := e.Status(slug)
				if st.State == model.StateRunning && max(st.Replicas, 1) == n {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("%s: state %q, %d of %d replicas", slug, st.State, st.Replicas, n)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	for _, s := range subjects {
		bus := func(n int) caller {
			server := fmt.Sprintf("%s-%d", s.name, n)
			return func(ctx context.Context) error {
				_, err := e.Client.Call(ctx, server, s.tool, s.args, nil)
				return err
			}
		}
		one := same(bus(1), replicaCallers)
		for n := 1; n <= 3; n++ {
			b.Run(fmt.Sprintf("%s/replicas=%d", s.name, n), func(b *testing.B) {
				sides := []side{{name: "direct", callers: same(s.direct(b), replicaCallers)}}
				if n > 1 {
					sides = append(sides, side{name: "1replica", callers: one})
				}
				pairedVs(b, side{callers: same(bus(n), replicaCallers)}, sides...)
			})
		}
	}
}
