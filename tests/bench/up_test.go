package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// buildMcpbus compiles the mcpbus command into dir.
func buildMcpbus(b *testing.B, dir string) string {
	b.Helper()
	_, self, _, _ := runtime.Caller(0)
	out := filepath.Join(dir, "mcpbus")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = filepath.Join(filepath.Dir(self), "..", "..", "tools", "mcpbus")
	if b, err := cmd.CombinedOutput(); err != nil {
		panic(fmt.Sprintf("building mcpbus: %v\n%s", err, b))
	}
	return out
}

// viaUp runs `mcpbus up` as its own process, the way it is deployed, and
// calls through it over TCP from this process, as an agent would. env adds
// variables to the up process (GOMAXPROCS, GOGC).
func viaUp(b *testing.B, env ...string) caller {
	b.Helper()
	dir := b.TempDir()
	bin := buildMcpbus(b, dir)
	cfg := filepath.Join(dir, "servers.json")
	body := fmt.Sprintf(`{"servers":[{"name":"bench","enabled":true,"package":{"type":"binary","identifier":%q},"transport":{"type":"stdio"}}]}`, testServer)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
	port := testkit.FreePort(b)
	cmd := exec.Command(bin, "up", "--nats-port", fmt.Sprint(port), "--data-dir", filepath.Join(dir, "data"), "--config", cfg, "--log-level", "error", "--http-addr", "")
	cmd.Env = append(os.Environ(), env...)
	testkit.DieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	var nc *nats.Conn
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		nc, err = nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), operatorOf(filepath.Join(dir, "data"))...)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("mcpbus up not reachable: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Cleanup(nc.Close)
	c := client.New(nc, client.Options{})
	for {
		st, err := c.Runtime(context.Background(), "status", "bench")
		if err == nil && st.State == model.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("bench server not running: %+v %v", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return func(ctx context.Context) error {
		_, err := c.Call(ctx, "bench", "echo", echoArgs, nil)
		return err
	}
}

// BenchmarkToolCallUp compares an agent process calling through a running
// `mcpbus up` over TCP with the same agent spawning the server itself
// (direct), with a go-sdk client of the peer proxy (p50/peer, rate/peer)
// and with the floor of any bus path (bus-floor: the peer's stdio client
// behind one NATS request/reply, a plain nats.go caller over TCP, nothing of
// ours), in the same rounds.
func BenchmarkToolCallUp(b *testing.B) {
	peer := startPeer(b)
	floor := startPeer(b, "-nats", "127.0.0.1:0")
	for _, callers := range []int{1, 8} {
		b.Run(fmt.Sprintf("up/callers=%d", callers), func(b *testing.B) {
			pairedVs(b, side{callers: same(viaUp(b), callers)},
				side{name: "direct", callers: same(direct(b), callers)},
				side{name: "peer", callers: same(peer.caller(b), callers), pid: peer.pid},
				side{name: "bus-floor", callers: same(floor.natsCaller(b), callers), pid: floor.pid})
		})
	}
}

// operatorOf connects as the operator identity mcpbus up made in dataDir
// (nothing until it has made it).
func operatorOf(dataDir string) []nats.Option {
	opt, err := nats.NkeyOptionFromSeed(filepath.Join(dataDir, "nats", "operator.nk"))
	if err != nil {
		return []nats.Option{nats.Token("not yet")} // refused: the caller tries again
	}
	return []nats.Option{opt, nats.CustomInboxPrefix("_I.operator")}
}

// natsCaller is a plain nats.go caller of e's mcpbus up over TCP, as the
// operator (no libs/client): the echo arguments as the request on the
// tool's subject, the runner's reply undecoded but for its error headers.
// It is the NATS path the gateway's own cost is measured over.
func (e *gwEnv) natsCaller(b *testing.B) caller {
	b.Helper()
	nc, err := nats.Connect(e.nats, operatorOf(e.data)...)
	if err != nil {
		b.Fatalf("connecting to mcpbus up's NATS: %v", err)
	}
	b.Cleanup(nc.Close)
	subject := bus.NewSubjects("").Call("bench", "echo")
	return func(ctx context.Context) error {
		reply, err := nc.RequestWithContext(ctx, subject, echoArgs)
		if err != nil {
			return err
		}
		if code := reply.Header.Get(bus.HeaderErrorCode); code != "" {
			return fmt.Errorf("error %s: %s", code, reply.Header.Get(bus.HeaderError))
		}
		if reply.Header.Get(bus.HeaderToolResult) != bus.ToolResultOK {
			return fmt.Errorf("not a successful tool result: %q", reply.Data)
		}
		return nil
	}
}
