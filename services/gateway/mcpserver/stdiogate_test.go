package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/services/gateway/mcpserver"
)

// stdioPeer is a raw client of Serve over the stdio transport
// (mcpserver.NewLineTransport, which ServeStdio uses): lines in, answer
// lines out.
type stdioPeer struct {
	t       *testing.T
	w       io.WriteCloser
	answers chan []byte
	served  chan error
}

func serveLines(t *testing.T, e *env) *stdioPeer {
	t.Helper()
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p := &stdioPeer{t: t, w: c2sW, answers: make(chan []byte, 64), served: make(chan error, 1)}
	go func() { p.served <- e.agg.Serve(ctx, nil, mcpserver.NewLineTransport(c2sR, s2cW)) }()
	go func() {
		lines := bufio.NewScanner(s2cR)
		for lines.Scan() {
			p.answers <- append([]byte(nil), lines.Bytes()...)
		}
		close(p.answers)
	}()
	t.Cleanup(func() { _ = c2sW.Close() })
	return p
}

func (p *stdioPeer) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.w, line+"\n"); err != nil {
		p.t.Fatalf("write %s: %v", line, err)
	}
}

// stdioAnswer is one JSON-RPC response read from the peer.
type stdioAnswer struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// code is the answer's error code, 0 for a result.
func (a stdioAnswer) code() int64 {
	if a.Error != nil {
		return a.Error.Code
	}
	return 0
}

// next reads the next answer line: one response, or a batch of them.
func (p *stdioPeer) next(what string) []stdioAnswer {
	p.t.Helper()
	select {
	case line, ok := <-p.answers:
		if !ok {
			p.t.Fatalf("%s: the server hung up (Serve: %v)", what, <-p.served)
		}
		var note struct {
			Method string          `json:"method"`
			ID     json.RawMessage `json:"id"`
		}
		if json.Unmarshal(line, &note) == nil && note.Method != "" && note.ID == nil {
			return p.next(what) // a notification (a list changed), not an answer
		}
		var batch []stdioAnswer
		if json.Unmarshal(line, &batch) == nil {
			return batch
		}
		var one stdioAnswer
		if err := json.Unmarshal(line, &one); err != nil {
			p.t.Fatalf("%s: answer %s: %v", what, line, err)
		}
		return []stdioAnswer{one}
	case <-time.After(10 * time.Second):
		p.t.Fatalf("%s: no answer within 10s", what)
	}
	return nil
}

// ask sends one request and returns its answer.
func (p *stdioPeer) ask(line string) stdioAnswer {
	p.t.Helper()
	p.send(line)
	a := p.next(line)
	if len(a) != 1 {
		p.t.Fatalf("%s: %d answers", line, len(a))
	}
	return a[0]
}

// Over stdio, a request before initialize gets -32600 (as on HTTP), not
// go-sdk's code 0; ping needs no initialize; after initialize requests pass.
func TestStdioRequestBeforeInitialize(t *testing.T) {
	e := start(t, mcpserver.Options{}, nil)
	p := serveLines(t, e)
	if a := p.ask(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`); a.code() != -32600 {
		t.Fatalf("tools/list before initialize: code %d, want -32600", a.code())
	}
	if a := p.ask(`{"jsonrpc":"2.0","id":2,"method":"ping"}`); a.code() != 0 || a.Result == nil {
		t.Fatalf("ping before initialize: code %d", a.code())
	}
	if a := p.ask(`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`); a.code() != 0 || a.Result == nil {
		t.Fatalf("initialize: code %d", a.code())
	}
	if a := p.ask(`{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{}}`); a.code() != 0 || a.Result == nil {
		t.Fatalf("tools/list after initialize: code %d", a.code())
	}
}

// A line that is not a JSON-RPC message gets its JSON-RPC error and the
// session goes on (go-sdk ended it, losing the answers to the requests in
// flight): -32700 without an id for bad JSON, -32600 for the rest, with the
// id when one can be read. A batch's bad members are answered so and the
// others served.
func TestStdioBadLinesKeepTheSession(t *testing.T) {
	e := start(t, mcpserver.Options{}, nil)
	e.addServer(t, "alpha", nil)
	p := serveLines(t, e)
	// 2025-03-26 has batches.
	if a := p.ask(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`); a.code() != 0 || a.Result == nil {
		t.Fatalf("initialize: code %d", a.code())
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// A call in flight while the bad lines come.
	p.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__sleep","arguments":{"ms":300}}}`)
	lines := []string{
		`{bad json`,
		`{"id":7,"method":"ping"}`, // no "jsonrpc"
		`{"jsonrpc":"2.0","id":"x","method":5}`,
		`[]`,
		`42`,
		`{"jsonrpc":"2.0","id":3} {"jsonrpc":"2.0","id":4}`,
		`[{"jsonrpc":"2.0","id":8,"method":"ping"},{"id":9,"method":"ping"}]`,
	}
	for _, l := range lines {
		p.send(l)
	}
	p.send(`{"jsonrpc":"2.0","id":10,"method":"tools/list"}`)
	got := map[string][]int64{}
	for range len(lines) + 3 { // the batch has two answer lines; the call and tools/list one each
		for _, a := range p.next("the answers") {
			got[string(a.ID)] = append(got[string(a.ID)], a.code())
		}
	}
	want := map[string][]int64{
		// No id (go-sdk writes none for a null one; MCP's error response
		// has it optional) when none could be read.
		"":  {-32700, -32600, -32600, -32700},
		"7": {-32600}, `"x"`: {-32600}, "9": {-32600},
		"8": {0}, "2": {0}, "10": {0},
	}
	for id, codes := range want {
		if len(got[id]) != len(codes) {
			t.Fatalf("answers by id %v, want codes %v", got, want)
		}
		for _, c := range codes {
			found := false
			for _, g := range got[id] {
				found = found || g == c
			}
			if !found {
				t.Fatalf("answers by id %v, want codes %v", got, want)
			}
		}
	}
	select {
	case err := <-p.served:
		t.Fatalf("Serve ended: %v", err)
	default:
	}
	_ = p.w.Close()
	select {
	case err := <-p.served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the client hung up")
	}
}

// Over stdio as on /mcp: a second initialize is -32600 (go-sdk says code 0),
// logging/setLevel -32601 (no logging capability: the gateway relays no
// server's log messages), a list cursor the gateway did not issue -32602.
func TestStdioRefusals(t *testing.T) {
	e := start(t, mcpserver.Options{}, nil)
	p := serveLines(t, e)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	a := p.ask(init)
	var res struct {
		Capabilities map[string]json.RawMessage `json:"capabilities"`
	}
	if a.code() != 0 || json.Unmarshal(a.Result, &res) != nil {
		t.Fatalf("initialize: code %d", a.code())
	}
	if _, ok := res.Capabilities["logging"]; ok {
		t.Fatalf("the gateway declares logging: %s", a.Result)
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, c := range []struct {
		line string
		code int64
	}{
		{init, -32600},
		{`{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"debug"}}`, -32601},
		{`{"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"loud"}}`, -32601},
		{`{"jsonrpc":"2.0","id":4,"method":"resources/list","params":{"cursor":"bogus"}}`, -32602},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{}}`, 0},
	} {
		if a := p.ask(c.line); a.code() != c.code {
			t.Errorf("%s: code %d (%+v), want %d", c.line, a.code(), a.Error, c.code)
		}
	}
}
