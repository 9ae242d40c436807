package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// pipe is the server's stdio: newline-delimited JSON-RPC messages, each
// request answered by the response of its id.
type pipe struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	wmu  sync.Mutex
	next atomic.Int64

	mu      sync.Mutex
	waiting map[int64]chan *jsonrpc.Response
	err     error // set once the server's stdout ends
}

func startPipe(ctx context.Context, command string, args []string) (*pipe, error) {
	cmd := exec.Command(command, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", command, err)
	}
	p := &pipe{cmd: cmd, in: in, waiting: map[int64]chan *jsonrpc.Response{}}
	go p.read(out)
	return p, nil
}

// read dispatches the server's responses; anything else (its notifications
// and requests) the floor ignores.
func (p *pipe) read(out io.Reader) {
	r := bufio.NewReaderSize(out, 64<<10)
	var err error
	for {
		var line []byte
		line, err = r.ReadBytes('\n')
		if len(line) > 1 {
			msg, derr := jsonrpc.DecodeMessage(line)
			if resp, ok := msg.(*jsonrpc.Response); derr == nil && ok {
				if id, ok := resp.ID.Raw().(int64); ok {
					p.mu.Lock()
					ch := p.waiting[id]
					delete(p.waiting, id)
					p.mu.Unlock()
					if ch != nil {
						ch <- resp
					}
				}
			}
		}
		if err != nil {
			break
		}
	}
	p.mu.Lock()
	p.err = fmt.Errorf("the server's stdout ended: %w", err)
	for id, ch := range p.waiting {
		close(ch)
		delete(p.waiting, id)
	}
	p.mu.Unlock()
}

func (p *pipe) write(msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_, err = p.in.Write(data)
	return err
}

func (p *pipe) notify(method string, params any) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	return p.write(&jsonrpc.Request{Method: method, Params: raw})
}

// call sends one request and returns its result's bytes, or its error (a
// *jsonrpc.Error when the server answered one).
func (p *pipe) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	res, _, err := p.callID(ctx, method, params)
	return res, err
}

// callID is call, with the request's id.
func (p *pipe) callID(ctx context.Context, method string, params any) (res json.RawMessage, n int64, err error) {
	n = p.next.Add(1)
	res, err = p.send(ctx, n, method, params)
	return res, n, err
}

func (p *pipe) send(ctx context.Context, n int64, method string, params any) (json.RawMessage, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	id, err := jsonrpc.MakeID(float64(n))
	if err != nil {
		return nil, err
	}
	ch := make(chan *jsonrpc.Response, 1)
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return nil, p.err
	}
	p.waiting[n] = ch
	p.mu.Unlock()
	forget := func() {
		p.mu.Lock()
		delete(p.waiting, n)
		p.mu.Unlock()
	}
	if err := p.write(&jsonrpc.Request{ID: id, Method: method, Params: raw}); err != nil {
		forget()
		return nil, err
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, p.err
		}
		if resp.Error != nil {
			return nil, resp.Error
		}
		return resp.Result, nil
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	}
}

func (p *pipe) close() {
	_ = p.in.Close()
	_ = p.cmd.Wait()
}
