package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/testkit"
)

// The peer reference: the most-used shape of a Go MCP proxy, a Streamable
// HTTP → stdio proxy built on github.com/mark3labs/mcp-go (cmd/peerproxy),
// run as a process of its own in front of the same test server, stateless
// (peer) and with a session per client (peer-session, mcp-go's default, as
// users run it). The gateway benchmarks measure both in the same rounds as
// /mcp and /mcp/invoke (p50/peer, rate/peer, p50/peer-session, …).

// peerEnv is a running peer proxy.
type peerEnv struct {
	url     string // its Streamable HTTP endpoint
	pid     int
	session bool // started with -session: every client must get a session id
}

// startPeer builds cmd/peerproxy and runs it, with flags (-session: a
// session per client; -bus: the floor of a bus design), in front of a new test server (which it spawns over
// stdio); it stops when b ends.
func startPeer(b *testing.B, flags ...string) *peerEnv {
	b.Helper()
	p := startProxy(b, "peerproxy", flags...)
	p.session = slices.Contains(flags, "-session")
	if strings.HasPrefix(p.url, "nats://") {
		await(b, "the peer's bus floor", p.natsCaller(b))
	} else {
		await(b, "the peer proxy", p.caller(b))
	}
	return p
}

// startRelay builds cmd/relayfloor and runs it with flags (-js dir: a
// durable record of each call) in front of a new test server: the floor of
// a proxy's call path (see its doc). Its callers are pinned to an era
// (relay.callerOf).
func startRelay(b *testing.B, flags ...string) *peerEnv {
	b.Helper()
	p := startProxy(b, "relayfloor", flags...)
	await(b, "the relay floor", p.callerOf(b, "2025-11-25"))
	await(b, "the relay floor", p.callerOf(b, "2026-07-28"))
	return p
}

// startProxy builds ./tests/bench/cmd/<name> and runs it with flags in
// front of a new test server (which it spawns over stdio), until b ends.
func startProxy(b *testing.B, name string, flags ...string) *peerEnv {
	b.Helper()
	bin, cleanup, err := testkit.BuildCommand(name, "./tests/bench/cmd/"+name)()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cleanup)
	cmd := exec.Command(bin, append(flags, testServer)...)
	cmd.Stderr = os.Stderr
	// Should this process die, the proxy goes too (and the test server,
	// whose stdin closes, after it).
	testkit.DieWithTest(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("%s printed no URL: %v", name, err)
	}
	return &peerEnv{url: strings.TrimSpace(line), pid: cmd.Process.Pid}
}

// natsCaller is a plain nats.go caller over TCP of a peer started with
// -nats (the floor of the bus path): the tools/call params of echo as the
// request, the encoded result as the reply, which it does not decode (nor
// does libs/client decode the runner's).
func (p *peerEnv) natsCaller(b *testing.B) caller {
	b.Helper()
	nc, err := nats.Connect(p.url)
	if err != nil {
		b.Fatalf("connecting to the peer's bus floor: %v", err)
	}
	b.Cleanup(nc.Close)
	params, err := json.Marshal(map[string]any{"name": "echo", "arguments": echoArgs})
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context) error {
		msg, err := nc.RequestWithContext(ctx, "call", params)
		if err == nil && bytes.Contains(msg.Data, []byte(`"isError":true`)) {
			err = fmt.Errorf("tool error: %s", msg.Data)
		}
		return err
	}
}

// caller is a go-sdk client on the peer's endpoint (Streamable HTTP, go-sdk's
// defaults, its own connection pool, as the /mcp rows connect) calling the
// test server's echo, which the peer exposes under its own name. On a
// session peer the client is pinned to 2025-11-25, the era with sessions.
func (p *peerEnv) caller(b *testing.B) caller {
	b.Helper()
	// mcp-go v1.2.1 also speaks 2026-07-28 (no session), go-sdk's first
	// choice: a session needs the client on 2025-11-25.
	version := ""
	if p.session {
		version = "2025-11-25"
	}
	sess := p.connect(b, version)
	// The two modes must differ on the wire, or the rows compare nothing.
	if (sess.ID() != "") != p.session {
		b.Fatalf("peer proxy (session mode %v) gave the client session id %q", p.session, sess.ID())
	}
	return toolCaller(sess, "echo")
}

// invokeCaller posts the echo arguments to the relay's plain HTTP path
// (relayfloor -nats: POST /invoke/<tool>, the runner's reply as the answer),
// the floor of /mcp/invoke over mcpbus's NATS path.
func (p *peerEnv) invokeCaller(b *testing.B) caller {
	b.Helper()
	url := strings.TrimSuffix(p.url, "/mcp") + "/invoke/echo"
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	hc := &http.Client{Transport: t}
	b.Cleanup(t.CloseIdleConnections)
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(echoArgs))
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || bytes.Contains(data, []byte(`"isError":true`)) {
			return fmt.Errorf("HTTP %d: %s", resp.StatusCode, data)
		}
		return nil
	}
}

// callerOf is caller with the client pinned to protocol version (a session
// on 2025-11-25, none on 2026-07-28), for the relay floor.
func (p *peerEnv) callerOf(b *testing.B, version string) caller {
	b.Helper()
	sess := p.connect(b, version)
	if (sess.ID() != "") != (version < "2026-07-28") {
		b.Fatalf("%s on protocol %s gave the client session id %q", p.url, version, sess.ID())
	}
	return toolCaller(sess, "echo")
}

// connect is a go-sdk client session on p (Streamable HTTP, go-sdk's
// defaults, its own connection pool, as the /mcp rows connect), pinned to
// version unless it is empty.
func (p *peerEnv) connect(b *testing.B, version string) *mcp.ClientSession {
	b.Helper()
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 32
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var opts *mcp.ClientSessionOptions
	if version != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url, HTTPClient: &http.Client{Transport: t}}, opts)
	if err != nil {
		b.Fatalf("connecting to %s: %v", p.url, err)
	}
	b.Cleanup(func() { _ = sess.Close(); t.CloseIdleConnections() })
	return sess
}

// reportRSS reports the resident set size of process pid, in MiB, as metric
// name (peer-rss-MiB, up-rss-MiB).
func reportRSS(b *testing.B, name string, pid int) {
	b.Helper()
	b.ReportMetric(float64(procRSS(b, strconv.Itoa(pid)))/(1<<20), name)
	// The anonymous part (heap, stacks, runtime): VmRSS also counts the
	// pages of the executable it has touched, which scale with its code.
	b.ReportMetric(float64(procStatus(b, strconv.Itoa(pid), "RssAnon"))/(1<<20), strings.Replace(name, "-rss-", "-anon-", 1))
}

// BenchmarkPeerProxy is the peer proxy alone against the direct baseline,
// stateless and in session mode, each with one client session, for 1 and 8
// callers (the gateway benchmarks have the same rows next to /mcp's).
func BenchmarkPeerProxy(b *testing.B) {
	for _, mode := range []struct{ name, flag string }{{"stateless", ""}, {"session", "-session"}} {
		b.Run(mode.name, func(b *testing.B) {
			var p *peerEnv
			if mode.flag == "" {
				p = startPeer(b)
			} else {
				p = startPeer(b, mode.flag)
			}
			for _, callers := range []int{1, 8} {
				b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
					paired(b, same(p.caller(b), callers), same(direct(b), callers))
					reportRSS(b, "peer-rss-MiB", p.pid)
				})
			}
		})
	}
}
