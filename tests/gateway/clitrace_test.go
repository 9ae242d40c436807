package gateway

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/testkit"
	"github.com/mcpbus/mcpbus/tests/internal/clitest"
)

// byName is the first exported span of service named name, in any trace.
func (s *otlpSpans) byName(service, name string) (otlpSpan, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range s.spans {
		if sp.service == service && sp.name == name {
			return sp, true
		}
	}
	return otlpSpan{}, false
}

// inTrace is every exported span of trace.
func (s *otlpSpans) inTrace(trace string) []otlpSpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []otlpSpan
	for _, sp := range s.spans {
		if sp.trace == trace {
			out = append(out, sp)
		}
	}
	return out
}

// A client command exports its spans as mcpbus up does: `mcpbus call` is one
// trace rooted at the CLI's own span (named after the command), its bus
// request under it, then the runner's process and tools/call spans, with no
// span whose parent the collector never got. With the collector down or not
// answering, the command still ends at once or within its bounded flush.
func TestCLICommandIsOneTrace(t *testing.T) {
	t.Parallel()
	sink := newOTLPSpans(t)
	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + sink.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_BSP_SCHEDULE_DELAY=100"}
	up := startUpGatewayEnv(t, mcpbusBin, func(string) []string { return otel }, "alpha")

	cli := up.CLI()
	cli.Env = clitest.Env(otel...)
	if r := cli.Run(t, "call", "alpha.echo", `{"message":"traced"}`); r.Code != 0 || !strings.Contains(r.Stdout, "traced") {
		t.Fatalf("call: %s", r)
	}
	// The CLI flushed at exit: its spans are in already; the runner's follow
	// within its batch delay.
	root, ok := sink.byName("mcpbus-cli", "mcpbus call")
	if !ok {
		t.Fatal("the CLI exported no span named mcpbus call")
	}
	if root.parent != "" {
		t.Errorf("mcpbus call has parent %s, want none (the trace's root)", root.parent)
	}
	var snd, proc, call otlpSpan
	testkit.WaitFor(t, 30*time.Second, func() (bool, string) {
		var ok [3]bool
		snd, ok[0] = sink.find(root.trace, "mcpbus-cli", "send mcp.v1.call.{server}.{tool}")
		proc, ok[1] = sink.find(root.trace, "mcpbus", "process mcp.v1.call.{server}.{tool}")
		call, ok[2] = sink.find(root.trace, "mcpbus", "tools/call echo")
		return ok == [3]bool{true, true, true}, fmt.Sprintf("spans of the CLI's trace exported (CLI send; up process, tools/call): %v", ok)
	})
	if snd.parent != root.id || proc.parent != snd.id || call.parent != proc.id {
		t.Errorf("not chained mcpbus call → send → process → tools/call echo: %+v %+v %+v %+v", root, snd, proc, call)
	}
	spans := sink.inTrace(root.trace)
	ids := map[string]bool{}
	for _, sp := range spans {
		ids[sp.id] = true
	}
	for _, sp := range spans {
		if sp.parent != "" && !ids[sp.parent] {
			t.Errorf("span %s of %s has parent %s, which no one exported", sp.name, sp.service, sp.parent)
		}
	}

	// A collector that refuses the connection: the export fails at once (no
	// retries). One that accepts and never answers: the flush gives up after
	// its bound (2 s), well before the exporter's own 10 s timeout.
	refused := testkit.FreePort(t)
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			defer c.Close() // held open, unanswered, until the test ends
		}
	}()
	for _, tc := range []struct{ name, endpoint string }{
		{"refused", fmt.Sprintf("http://127.0.0.1:%d", refused)},
		{"unanswered", "http://" + hang.Addr().String()},
	} {
		cli.Env = clitest.Env("OTEL_EXPORTER_OTLP_ENDPOINT=" + tc.endpoint)
		start := time.Now()
		r := cli.Run(t, "call", "alpha.echo", `{"message":"untraced"}`)
		took := time.Since(start)
		if r.Code != 0 || !strings.Contains(r.Stdout, "untraced") {
			t.Errorf("collector %s: call: %s", tc.name, r)
		}
		if took > 6*time.Second {
			t.Errorf("collector %s: the call took %s, want its flush bounded (2 s)", tc.name, took)
		}
	}
	if accepted.Load() == 0 {
		t.Error("the CLI never tried the unanswering collector")
	}
}
