package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewLineTransport is go-sdk's mcp.IOTransport (newline-delimited JSON-RPC
// over r and w, as ServeStdio speaks on stdin and stdout) with each line
// checked before go-sdk reads it: go-sdk ends the session on a line that is
// not JSON, or not a JSON-RPC message, and the replies to the requests in
// flight are lost. Here such a line gets its JSON-RPC error and the session
// goes on, as JSON-RPC asks: -32700 for one that is not JSON, -32600 for one
// that is not a request, notification or response (with its id when it has
// one that can be read), an empty batch, a bare JSON value or a line over
// mcp.DefaultMaxLineLength. An answer without an id has none on the wire
// (go-sdk writes a null id so; MCP's error response has it optional). The
// bad members of a batch are answered so, in one array, and the rest go on
// as a batch.
func NewLineTransport(r io.ReadCloser, w io.WriteCloser) mcp.Transport {
	return &lineTransport{r: r, w: w}
}

type lineTransport struct {
	r io.ReadCloser
	w io.WriteCloser
}

func (t *lineTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	out := &lockedWriter{w: t.w}
	in := &lineFilter{rc: t.r, br: bufio.NewReaderSize(t.r, 64<<10), out: out, max: mcp.DefaultMaxLineLength}
	// The filter bounds the lines; go-sdk's own bound would end the session.
	return (&mcp.IOTransport{Reader: in, Writer: out, MaxLineLength: -1}).Connect(ctx)
}

// lockedWriter is the output shared by go-sdk and lineFilter's answers:
// each Write is one whole message (go-sdk writes a message at once).
type lockedWriter struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return l.w.Close() }

// lineFilter reads lines of rc and passes on those go-sdk can read,
// answering the others itself on out.
type lineFilter struct {
	rc      io.Closer
	br      *bufio.Reader
	out     io.Writer
	max     int
	pending []byte // the rest of the line being passed on
	err     error  // the read error after pending
}

func (f *lineFilter) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		line, tooLong, err := f.line()
		f.err = err
		if tooLong {
			if werr := f.answer(refusal(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: a message longer than %d bytes", f.max))); werr != nil {
				return 0, werr
			}
			continue
		}
		pass, werr := f.check(line)
		if werr != nil {
			return 0, werr
		}
		f.pending = pass
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

func (f *lineFilter) Close() error { return f.rc.Close() }

// line reads the next line, without its newline; a line over max is
// skipped to its end (tooLong).
func (f *lineFilter) line() (line []byte, tooLong bool, err error) {
	for {
		chunk, err := f.br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > f.max+1 {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return bytes.TrimSuffix(line, []byte{'\n'}), tooLong, err
		}
	}
}

// check answers line when go-sdk could not read it and returns what to pass
// on: the message with a newline (go-sdk takes no blank after it), nil
// when nothing is.
func (f *lineFilter) check(line []byte) ([]byte, error) {
	line = bytes.TrimSpace(line)
	switch {
	case len(line) == 0:
		return nil, nil
	case !json.Valid(line):
		return nil, f.answer(refusal(jsonrpc.ID{}, jsonrpc.CodeParseError, "Parse error: the line is not valid JSON"))
	case line[0] == '{':
		if err := decodeChecked(line); err != nil {
			return nil, f.answer(invalid(line, err))
		}
	case line[0] == '[':
		var members []json.RawMessage
		if err := json.Unmarshal(line, &members); err != nil || len(members) == 0 {
			return nil, f.answer(refusal(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Invalid Request: an empty batch"))
		}
		var good, bad []json.RawMessage
		for _, m := range members {
			if err := decodeChecked(m); err != nil {
				ans, _ := jsonrpc.EncodeMessage(invalid(m, err))
				bad = append(bad, ans)
			} else {
				good = append(good, m)
			}
		}
		if len(bad) == 0 {
			break
		}
		data, err := json.Marshal(bad)
		if err != nil {
			return nil, err
		}
		if _, err := f.out.Write(append(data, '\n')); err != nil {
			return nil, err
		}
		if len(good) == 0 {
			return nil, nil
		}
		line, _ = json.Marshal(good)
	default:
		return nil, f.answer(refusal(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Invalid Request: not a JSON-RPC message"))
	}
	return append(line, '\n'), nil
}

func (f *lineFilter) answer(resp *jsonrpc.Response) error {
	data, err := jsonrpc.EncodeMessage(resp)
	if err != nil {
		return err
	}
	_, err = f.out.Write(append(data, '\n'))
	return err
}

func refusal(id jsonrpc.ID, code int64, msg string) *jsonrpc.Response {
	return &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: code, Message: msg}}
}

// decodeChecked is whether go-sdk can read the message in data, and answer
// it under its id (checkID).
func decodeChecked(data []byte) error {
	msg, err := decodeMessage(data)
	if err != nil {
		return err
	}
	return checkID(msg, data)
}

// invalid answers a JSON object (or batch member) that is not a JSON-RPC
// message, under its id when it has one that can be read.
func invalid(raw json.RawMessage, err error) *jsonrpc.Response {
	var v struct {
		ID any `json:"id"`
	}
	_ = json.Unmarshal(raw, &v)
	id, idErr := jsonrpc.MakeID(v.ID)
	if idErr != nil || !exactID(raw) {
		id = jsonrpc.ID{} // none rather than another request's
	}
	return refusal(id, jsonrpc.CodeInvalidRequest, "Invalid Request: "+err.Error())
}
