package bench

import (
	"context"
	"testing"
	"time"
)

// BenchmarkGatewayEdge is the in-process gateway's subject alone, one caller,
// no baseline between its calls: allocs/op and B/op (-benchmem) and the
// -cpuprofile/-memprofile of a run then hold one path only — the go-sdk
// client or HTTP client of this process, the gateway, the bus and the
// runner (the test server is a process of its own). Allocation counts do not
// depend on the machine's load, so this is the guide for the edge's cost:
//
//	go test -run '^$' -bench 'GatewayEdge' -benchtime 3000x -benchmem -memprofile mem.out ./bench/
//
// Rows: /mcp with the go-sdk client pinned to 2025-11-25 (a session) and to
// 2026-07-28 (stateless), and POST /mcp/invoke.
func BenchmarkGatewayEdge(b *testing.B) {
	e := startGateway(b)
	for _, row := range edgeRows(e) {
		b.Run(row.name, func(b *testing.B) {
			call := row.mk(b)
			for range 200 { // warm-up: connections, caches, the runner's session
				edgeCall(b, call)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				edgeCall(b, call)
			}
		})
	}
}

func edgeCall(b *testing.B, call caller) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := call(ctx); err != nil {
		b.Fatal(err)
	}
}

// edgeRow is one path of a single caller through the in-process gateway.
type edgeRow struct {
	name string
	mk   func(*testing.B) caller
}

// edgeRows are the rows of BenchmarkGatewayEdge and BenchmarkGatewayStages:
// /mcp with the go-sdk client pinned to 2025-11-25 (a session) and to
// 2026-07-28 (stateless), and POST /mcp/invoke.
func edgeRows(e *gwEnv) []edgeRow {
	return []edgeRow{
		{"mcp-session", func(b *testing.B) caller { return mcpCaller(e.mcpLegacySession(b)) }},
		{"mcp-2026-07-28", func(b *testing.B) caller { return mcpCaller(e.mcpSession(b)) }},
		{"invoke", e.invoker},
	}
}
