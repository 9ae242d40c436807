package runner_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/jsonscan"
	"github.com/mcpbus/mcpbus/services/runner/internal/launch"
)

// BenchmarkHTTPSessionCall measures what a raw tools/call could save on a
// Streamable HTTP upstream (issue 16), below the runner: one go-sdk client
// session on the test server (its own process, -http), and per call either
// go-sdk's CallTool plus the json.Marshal the runner does for its reply
// ("gosdk"), or a prototype raw call over the same session ("raw": one POST
// of the JSON-RPC request with the session's headers, the result taken
// from the application/json body or the SSE event as bytes and checked by
// launch.CheckToolResult, which the runner's raw path does). Paired as
// BenchmarkCall is: each iteration runs a block of calls on one path, then
// on the other; -benchtime Nx for N pairs. par=8 runs each block from 8
// goroutines. Per call and path: wall µs, cpu-µs of this process (the
// client side only), the server's cpu-µs, allocations.
func BenchmarkHTTPSessionCall(b *testing.B) {
	for _, mode := range []struct{ name, flag string }{{"sse", ""}, {"json", "-json"}} {
		b.Run(mode.name, func(b *testing.B) {
			url, pid := startHTTPTestServer(b, mode.flag)
			hc := &http.Client{Transport: pooledTransport()}
			client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = sess.Close() })
			proto := &rawProto{hc: hc, url: url, sid: sess.ID(), version: sess.InitializeResult().ProtocolVersion}
			for _, c := range []struct{ name, tool, args string }{
				{"echo", "echo", `{"message":"hello"}`},
				{"64KiB", "large", `{"bytes":65536}`},
			} {
				args := json.RawMessage(c.args)
				paths := [2]func(context.Context) error{
					func(ctx context.Context) error {
						_, err := proto.call(ctx, c.tool, args)
						return err
					},
					func(ctx context.Context) error {
						res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: args})
						if err != nil {
							return err
						}
						if res.IsError {
							return fmt.Errorf("tool error: %+v", res.Content)
						}
						_, err = json.Marshal(res)
						return err
					},
				}
				for _, par := range []int{1, 8} {
					b.Run(fmt.Sprintf("%s/par=%d", c.name, par), func(b *testing.B) {
						pairedBlocks(b, pid, par, paths)
					})
				}
			}
		})
	}
}

// pairedBlocks runs blocks of calls on paths[0] (raw) and paths[1] (gosdk)
// in turn, from par goroutines, and reports each path's cost per call.
func pairedBlocks(b *testing.B, pid, par int, paths [2]func(context.Context) error) {
	const block = 200
	ctx := context.Background()
	var sum [2]blockCost
	for b.Loop() {
		for i, call := range paths {
			if err := call(ctx); err != nil { // settle on the path
				b.Fatalf("path %d: %v", i, err)
			}
			start := takeCost(pid)
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, par)
			for range par {
				wg.Go(func() {
					for next.Add(1) <= block {
						if err := call(ctx); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			sum[i].add(takeCost(pid).since(start))
			select {
			case err := <-errs:
				b.Fatal(err)
			default:
			}
		}
	}
	for i, path := range []string{"raw", "gosdk"} {
		n := float64(b.N * block)
		b.ReportMetric(float64(sum[i].wall.Nanoseconds())/n, path+"-ns/call")
		b.ReportMetric(float64(sum[i].cpu.Microseconds())/n, path+"-cpu-µs/call")
		b.ReportMetric(float64(sum[i].child.Microseconds())/n, path+"-server-cpu-µs/call")
		b.ReportMetric(float64(sum[i].allocs)/n, path+"-allocs/call")
		b.ReportMetric(float64(sum[i].bytes)/n, path+"-B/call")
	}
}

// startHTTPTestServer runs the test server on Streamable HTTP (extra: a flag
// such as -json) and returns its URL and pid.
func startHTTPTestServer(b *testing.B, extra string) (string, int) {
	b.Helper()
	args := []string{"-http", "127.0.0.1:0"}
	if extra != "" {
		args = append(args, extra)
	}
	cmd := exec.Command(testServer, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("the test server printed no URL: %v", err)
	}
	return strings.TrimSpace(line), cmd.Process.Pid
}

func pooledTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 32
	return t
}

// rawProto is the prototype raw call the benchmark measures.
type rawProto struct {
	hc                *http.Client
	url, sid, version string
	n                 atomic.Uint64
}

func (p *rawProto) call(ctx context.Context, tool string, args json.RawMessage) ([]byte, error) {
	id := strconv.FormatUint(p.n.Add(1), 10)
	body := make([]byte, 0, 128+len(args))
	body = append(body, `{"jsonrpc":"2.0","id":"mcpbus-`...)
	body = append(body, id...)
	body = append(body, `","method":"tools/call","params":{"name":"`...)
	body = append(body, tool...)
	body = append(body, `","arguments":`...)
	body = append(body, args...)
	body = append(body, "}}"...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["Accept"] = []string{"application/json, text/event-stream"}
	req.Header["Mcp-Session-Id"] = []string{p.sid}
	req.Header["Mcp-Protocol-Version"] = []string{p.version}
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(resp.Status)
	}
	want := `"mcpbus-` + id + `"`
	var result []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, err
		}
		result = resultOf(data, want)
	} else {
		br := bufio.NewReader(resp.Body)
		var data []byte
		for result == nil {
			line, err := br.ReadSlice('\n')
			if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
				if errors.Is(err, bufio.ErrBufferFull) {
					// A long data line: gather it.
					head := bytes.Clone(line) // line is only valid until the next read
					rest, rerr := br.ReadBytes('\n')
					line, err = append(head, rest...), rerr
				}
				if err != nil {
					return nil, err
				}
			}
			line = bytes.TrimRight(line, "\r\n")
			switch {
			case len(line) == 0:
				if len(data) > 0 {
					result = resultOf(data, want)
					data = data[:0]
				}
			case bytes.HasPrefix(line, []byte("data:")):
				data = append(data, bytes.TrimPrefix(line[5:], []byte(" "))...)
			}
		}
	}
	if result == nil {
		return nil, errors.New("no result")
	}
	if _, _, err := launch.CheckToolResult(result); err != nil {
		return nil, err
	}
	return result, nil
}

// resultOf is the result member of a response whose id is want, or nil.
func resultOf(msg []byte, want string) []byte {
	var id, result []byte
	jsonscan.Members(msg, func(k, v []byte) bool {
		switch string(k) {
		case "id":
			id = v
		case "result":
			result = v
		}
		return true
	})
	if string(id) != want {
		return nil
	}
	return result
}
