package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/jsonscan"
)

// Raw tool calls: a tools/call request written as one line with the
// caller's arguments spliced in unparsed, and its response's result handed
// back as the bytes the server wrote. go-sdk would decode the result into a
// tree (with a fresh 32 KiB buffer per message in v1.8.0) only for the
// runner to encode it again for its reply.
//
// Raw calls carry string ids "mcpbus-<n>": go-sdk's client numbers its
// requests with integers, so the two never collide, and the read loop can
// tell a response to a raw call from one go-sdk waits for by its id alone.

// RawID is the JSON-RPC id of a raw call.
type RawID uint64

const rawIDPrefix = "mcpbus-"

func (id RawID) String() string { return rawIDPrefix + strconv.FormatUint(uint64(id), 10) }

// linePool holds the buffers raw request lines are built in, up to maxPooledLine.
var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledLine = 64 << 10

// requestMeta is the SEP-2575 _meta triple (protocol version, client info
// and capabilities) of go-sdk's first request after the handshake, rendered
// as JSON members. Under protocol 2026-07-28 every request must carry it;
// go-sdk adds it to its own requests and raw calls copy it from there, byte
// for byte.
type requestMeta struct{ p atomic.Pointer[[]byte] }

// HasRequestMeta reports whether raw calls can carry the SEP-2575 _meta of
// the session (captured from a request go-sdk sent after the handshake).
func (m *requestMeta) HasRequestMeta() bool { return m.p.Load() != nil }

// observe captures the triple from msg, one of go-sdk's outgoing messages.
func (m *requestMeta) observe(msg jsonrpc.Message) {
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() && req.Method != "server/discover" {
		// Not discover's: it proposes a version, later requests carry the agreed one.
		m.capture(req.Params)
	}
}

// CallTool sends tools/call for the tool name with args (a JSON object, or
// empty for none) and waits for its answer. meta is rendered JSON members to
// add to params._meta (`"traceparent":"…"`), or nil; the session's SEP-2575
// members are added when go-sdk sends them. It returns the response's result,
// a JSON object as the server wrote it; a JSON-RPC error response as an error
// wrapping *jsonrpc.Error; a closed connection or exited server as an error
// wrapping mcp.ErrConnectionClosed; and ctx's error when ctx ends first, after
// which notifications/cancelled tells the server, as go-sdk does for its calls.
func (c *StdioConn) CallTool(ctx context.Context, name string, args json.RawMessage, meta []byte) (json.RawMessage, RawID, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	n := c.nextID.Add(1)
	id := RawID(n)
	bp := linePool.Get().(*[]byte)
	line, err := appendToolCall((*bp)[:0], n, name, args, c.reqMeta.p.Load(), meta)
	if err != nil {
		linePool.Put(bp)
		return nil, id, err
	}
	ch := make(chan rawReply, 1)
	c.mu.Lock()
	if c.failed != nil {
		err := c.failed
		c.mu.Unlock()
		linePool.Put(bp)
		return nil, id, fmt.Errorf("calling \"tools/call\": %w", err)
	}
	c.pending[n] = ch
	c.mu.Unlock()
	err = c.writeLine(ctx, line)
	if cap(line) <= maxPooledLine { // large arguments are not worth keeping a buffer for
		*bp = line
		linePool.Put(bp)
	}
	if err != nil {
		c.forget(n)
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return nil, id, ctxErr // the server reads too slowly or not at all: the call's deadline
		}
		return nil, id, fmt.Errorf("calling \"tools/call\": %w: writing to the server: %v", mcp.ErrConnectionClosed, err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, id, fmt.Errorf("calling \"tools/call\": %w", r.err)
		}
		return r.result, id, nil
	case <-ctx.Done():
		if c.forget(n) {
			go c.notifyCancelled(n, ctx.Err())
		}
		return nil, id, ctx.Err()
	}
}

// forget removes a raw call's waiter; false when its answer came first.
func (c *StdioConn) forget(n uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[n]
	delete(c.pending, n)
	return ok
}

// notifyCancelled tells the server a raw call was given up, off the caller's
// path (a stuck server must not delay the caller past its deadline).
func (c *StdioConn) notifyCancelled(n uint64, reason error) {
	b := append(appendCancelled(nil, n, reason), '\n')
	select {
	case <-c.closed:
		return
	default:
	}
	// Bounded: a server that reads no more must not keep this goroutine.
	ctx, cancel := context.WithTimeout(context.Background(), cancelNoticeTimeout)
	defer cancel()
	_ = c.writeLine(ctx, b)
}

// cancelNoticeTimeout bounds the write of a notifications/cancelled.
const cancelNoticeTimeout = 5 * time.Second

// appendCancelled renders notifications/cancelled for raw call n.
func appendCancelled(b []byte, n uint64, reason error) []byte {
	b = append(b, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"`+rawIDPrefix...)
	b = strconv.AppendUint(b, n, 10)
	b = append(b, `","reason":`...)
	b = appendJSONString(b, reason.Error())
	return append(b, "}}"...)
}

// appendToolCall renders the request line of a raw tools/call.
func appendToolCall(b []byte, n uint64, name string, args json.RawMessage, reqMeta *[]byte, meta []byte) ([]byte, error) {
	b = append(b, `{"jsonrpc":"2.0","id":"`+rawIDPrefix...)
	b = strconv.AppendUint(b, n, 10)
	b = append(b, `","method":"tools/call","params":{`...)
	if reqMeta != nil || len(meta) > 0 {
		b = append(b, `"_meta":{`...)
		if reqMeta != nil {
			b = append(b, *reqMeta...)
			if len(meta) > 0 {
				b = append(b, ',')
			}
		}
		b = append(b, meta...)
		b = append(b, "},"...)
	}
	b = append(b, `"name":`...)
	b = appendJSONString(b, name)
	b = append(b, `,"arguments":`...)
	args = bytes.TrimSpace(args)
	switch {
	case len(args) == 0:
		b = append(b, "{}"...)
	case bytes.ContainsAny(args, "\r\n"):
		// A line break would end the message early: compact (JSON strings
		// cannot hold a raw one, so only whitespace between tokens goes).
		buf := bytes.NewBuffer(b)
		if err := json.Compact(buf, args); err != nil {
			return nil, fmt.Errorf("arguments are not valid JSON: %w", err)
		}
		b = buf.Bytes()
	default:
		b = append(b, args...)
	}
	return append(b, "}}\n"...), nil
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	plain := utf8.ValidString(s)
	for i := 0; plain && i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			plain = false
		}
	}
	if plain {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := json.Marshal(s) // escapes, and replaces invalid UTF-8 as go-sdk's encoder would
	return append(b, q...)
}

// route hands line to the raw call it answers and reports true, or reports
// false for a line that is go-sdk's. A late answer to a raw call that was
// given up is dropped (true).
func (c *StdioConn) route(line []byte) bool {
	m := scanMessage(line)
	if !m.ours {
		return false
	}
	c.mu.Lock()
	ch := c.pending[m.n]
	delete(c.pending, m.n)
	c.mu.Unlock()
	if ch == nil {
		return true
	}
	// Copied: line lives in the read buffer. Checked on the caller's
	// goroutine, not here, so the read loop moves on at once.
	r := m.reply()
	r.result = bytes.Clone(r.result)
	ch <- r
	return true
}

// rawMessage is what scanMessage finds in a message.
type rawMessage struct {
	n            uint64 // the raw call it answers, when ours
	ours         bool   // a response to a raw call
	result, errv []byte
}

// scanMessage tells a response to a raw call (id "mcpbus-<n>") from any
// other message (go-sdk's responses, the server's requests and
// notifications) and cuts out its result or error, without decoding.
func scanMessage(msg []byte) rawMessage {
	var m rawMessage
	method := false
	jsonscan.Members(msg, func(key, val []byte) bool {
		switch string(key) {
		case "id":
			m.n, m.ours = parseRawID(val)
			return m.ours // another id: go-sdk's, stop here
		case "method":
			method = true
			return false // a request or notification
		case "result":
			m.result = val
		case "error":
			m.errv = val
		}
		return true
	})
	m.ours = m.ours && !method
	return m
}

// reply is the outcome of a response to a raw call: its result (not
// copied) or its JSON-RPC error as *jsonrpc.Error.
func (m rawMessage) reply() rawReply {
	var r rawReply
	switch {
	case m.errv != nil:
		var we jsonrpc.Error
		if err := json.Unmarshal(m.errv, &we); err != nil {
			r.err = fmt.Errorf("the server sent an unreadable error: %v", err)
		} else {
			r.err = &we
		}
	case m.result != nil:
		r.result = m.result
	default:
		r.err = errors.New("the server sent a response with neither result nor error")
	}
	return r
}

// parseRawID reads an id value `"mcpbus-<n>"`.
func parseRawID(val []byte) (uint64, bool) {
	if len(val) < len(rawIDPrefix)+3 || val[0] != '"' || val[len(val)-1] != '"' ||
		string(val[1:1+len(rawIDPrefix)]) != rawIDPrefix {
		return 0, false
	}
	n, err := strconv.ParseUint(string(val[1+len(rawIDPrefix):len(val)-1]), 10, 64)
	return n, err == nil
}

// CheckToolResult checks that a raw result is a JSON object (go-sdk would
// have refused anything else) and reports its isError and whether its
// content is an array (a well-formed CallToolResult; callers may then pass
// it on without decoding it again).
func CheckToolResult(result []byte) (isError, content bool, err error) {
	if len(result) == 0 || result[0] != '{' || !json.Valid(result) {
		return false, false, errors.New("the server sent a result that is not a JSON object")
	}
	jsonscan.Members(result, func(key, val []byte) bool {
		switch {
		case jsonscan.KeyIs(key, "isError"):
			isError = string(val) == "true"
		case jsonscan.KeyIs(key, "content"):
			content = len(val) > 0 && val[0] == '['
		}
		return true
	})
	return isError, content, nil
}

// InputRequired reports whether a raw result asks for the client's input
// first (a multi round-trip result of protocol 2026-07-28: resultType
// "input_required" with inputRequests), which only go-sdk's session fulfils.
func InputRequired(result []byte) bool {
	if !bytes.Contains(result, []byte(`"input_required"`)) {
		return false // the common case, without a scan
	}
	required := false
	jsonscan.Members(result, func(key, val []byte) bool {
		if jsonscan.KeyIs(key, "resultType") {
			required = string(val) == `"input_required"`
			return false
		}
		return true
	})
	return required
}

// capture keeps the SEP-2575 members of a go-sdk request's
// params._meta ("io.modelcontextprotocol/…"), for raw calls to carry too.
func (m *requestMeta) capture(params json.RawMessage) {
	// Once: go-sdk's triple is fixed for a session (version and capabilities
	// are agreed at the handshake).
	if m.p.Load() != nil || !bytes.Contains(params, []byte(mcp.MetaKeyProtocolVersion)) {
		return
	}
	var out []byte
	jsonscan.Members(params, func(key, val []byte) bool {
		if string(key) != "_meta" {
			return true
		}
		jsonscan.Members(val, func(k, v []byte) bool {
			if bytes.HasPrefix(k, []byte("io.modelcontextprotocol/")) {
				if len(out) > 0 {
					out = append(out, ',')
				}
				out = append(out, '"')
				out = append(out, k...)
				out = append(out, `":`...)
				out = append(out, v...)
			}
			return true
		})
		return false
	})
	if len(out) > 0 {
		m.p.CompareAndSwap(nil, &out)
	}
}

// AppendMetaMember appends `"key":"value"` for CallTool's meta.
func AppendMetaMember(b []byte, key, value string) []byte {
	b = appendJSONString(b, key)
	b = append(b, ':')
	return appendJSONString(b, value)
}

// HasRequestMeta reports whether raw calls can carry the SEP-2575 _meta of
// the session (captured from a request go-sdk sent after the handshake).
func (c *StdioConn) HasRequestMeta() bool { return c.reqMeta.HasRequestMeta() }

// resultMembers are the members of a CallToolResult a caller gets.
var resultMembers = map[string]bool{"content": true, "structuredContent": true, "isError": true, "_meta": true, "resultType": true}

// KeepResultMembers returns result (a JSON object CheckToolResult accepted)
// with only the members of a CallToolResult: a server cannot put fields into
// a reply that mean something to whoever reads it elsewhere (a KV record,
// an API request). The common case, nothing extra, returns result as it is.
func KeepResultMembers(result []byte) []byte {
	extra := false
	jsonscan.Members(result, func(key, _ []byte) bool {
		extra = !resultMember(key)
		return !extra
	})
	if !extra {
		return result
	}
	return jsonscan.KeepMembers(result, resultMember)
}

// resultMember reports whether a raw key names a member of a CallToolResult
// (escapes decoded, as its reader will).
func resultMember(key []byte) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return resultMembers[string(key)]
	}
	return resultMembers[jsonscan.Key(key)]
}
