package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// BenchmarkCallSecrets is the secrets policy's cost per call on the bus
// path: two servers of one runner, the test server each, one with the
// default policy (arguments and results scanned) and one with secrets off,
// called in paired blocks like BenchmarkCall (use -benchtime Nx for N
// pairs). Per call and side it reports wall µs and cpu-µs of this process
// (caller, NATS server and runner: only the runner's scanning differs).
func BenchmarkCallSecrets(b *testing.B) {
	e := runnertest.Start(b, quickOpts())
	scan := runnertest.Binary("scan", testServer)
	plain := runnertest.Binary("plain", testServer)
	plain.SecretScan = model.SecretsPolicy{Arguments: model.SecretsOff, Results: model.SecretsOff}
	for _, c := range []model.McpConfig{scan, plain} {
		c.Runtime.Eager = true
		e.Put(b, c)
		e.WaitState(b, c.Name, model.StateRunning, 10*time.Second)
	}
	for _, c := range []struct{ name, tool, args string }{
		{"echo", "echo", `{"message":"hello"}`},
		// Prose with rule keywords (key, token, password): gitleaks runs its
		// keyword-gated rules on both the arguments and the result.
		{"prose-1KiB", "echo", `{"message":"` + strings.Repeat("Rotate the API key and the access token; never share a password. ", 16) + `"}`},
		{"4KiB", "large", `{"bytes":4096}`},
		{"64KiB", "large", `{"bytes":65536}`},
		// The same prose, 64 KiB, in the arguments and echoed in the result.
		{"prose-64KiB", "echo", `{"message":"` + strings.Repeat("Rotate the API key and the access token; never share a password. ", 1024) + `"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			args := json.RawMessage(c.args)
			const block = 200
			var sum [2]blockCost // scan, off
			sides := []int{0, 1}
			for b.Loop() {
				// Which side goes first alternates: the second block of a pair
				// runs on a warmer (or more loaded) process.
				sides[0], sides[1] = sides[1], sides[0]
				for _, i := range sides {
					slug := []string{"scan", "plain"}[i]
					if _, err := e.Client.Call(ctx, slug, c.tool, args, nil); err != nil {
						b.Fatal(err)
					}
					start := takeCost(0)
					for range block {
						if _, err := e.Client.Call(ctx, slug, c.tool, args, nil); err != nil {
							b.Fatal(err)
						}
					}
					sum[i].add(takeCost(0).since(start))
				}
			}
			for i, side := range []string{"scan", "off"} {
				n := float64(b.N * block)
				b.ReportMetric(float64(sum[i].wall.Microseconds())/n, side+"-µs/call")
				b.ReportMetric(float64(sum[i].cpu.Microseconds())/n, side+"-cpu-µs/call")
			}
			b.ReportMetric(100*(float64(sum[0].wall)/float64(sum[1].wall)-1), "wall-%")
			b.ReportMetric(100*(float64(sum[0].cpu)/float64(sum[1].cpu)-1), "cpu-%")
		})
	}
}
