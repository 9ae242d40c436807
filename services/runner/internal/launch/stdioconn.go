package launch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StdioTransport runs a command and speaks newline-delimited JSON-RPC with it
// over stdin/stdout, like go-sdk's mcp.CommandTransport, but over a
// connection of ours (StdioConn): go-sdk keeps the session while the runner
// sends plain tools/call requests past it, as raw JSON (see toolcall.go).
type StdioTransport struct {
	Command *exec.Cmd
	// TerminateDuration is how long Close waits after closing stdin before
	// it sends SIGTERM to the child (default 5s), as CommandTransport did.
	TerminateDuration time.Duration
	// MaxLineBytes bounds one message from the child (default
	// mcp.DefaultMaxLineLength, go-sdk's own bound); a longer one ends the connection.
	MaxLineBytes int

	// start replaces Command.Start (a sandboxed start); started runs once it
	// has succeeded; exited runs once the child has been waited for; kill
	// ends the child and everything it started (Process.Kill), in place of
	// SIGKILL to the child alone. All optional.
	start   func() error
	started func()
	exited  func()
	kill    func()

	conn atomic.Pointer[StdioConn]
}

// exitDrain is how long the output of a child that exited is still read:
// what it wrote before exiting. A process it started (a browser, a language
// server) may hold the pipes open for ever, so its exit, not the pipes'
// end, tells that the server is gone.
const exitDrain = time.Second

// Connect starts the command and connects to it over stdin/stdout.
func (t *StdioTransport) Connect(context.Context) (mcp.Connection, error) {
	// stdin too is a pipe of ours: a write to a server that reads no more
	// ends at its context's end (a write deadline), see writeLine.
	inR, stdin, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	t.Command.Stdin = inR
	// Pipes of our own rather than StdoutPipe and os/exec's stderr copier:
	// the child is reaped as soon as it exits (wait), without waiting for
	// what its own children hold open, and the reads end on a deadline then.
	stdout, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		stdin.Close()
		return nil, err
	}
	t.Command.Stdout = outW
	var stderr, errW *os.File
	var errDst io.Writer
	if w := t.Command.Stderr; w != nil {
		if _, ok := w.(*os.File); !ok {
			if stderr, errW, err = os.Pipe(); err != nil {
				inR.Close()
				stdin.Close()
				stdout.Close()
				outW.Close()
				return nil, err
			}
			t.Command.Stderr, errDst = errW, w
		}
	}
	start := t.Command.Start
	if t.start != nil {
		start = t.start
	}
	err = start()
	// The child has its copies of these ends (or never will).
	inR.Close()
	outW.Close()
	if errW != nil {
		errW.Close()
	}
	if err != nil {
		stdin.Close()
		stdout.Close()
		if stderr != nil {
			stderr.Close()
		}
		return nil, err
	}
	if t.started != nil {
		t.started()
	}
	c := &StdioConn{
		cmd: t.Command, exited: t.exited, kill: t.kill, stdin: stdin, stdout: stdout,
		terminate: orDefaultDuration(t.TerminateDuration, 5*time.Second),
		maxLine:   orDefaultInt(t.MaxLineBytes, mcp.DefaultMaxLineLength),
		incoming:  make(chan msgOrErr),
		closed:    make(chan struct{}),
		broken:    make(chan struct{}),
		reaped:    make(chan struct{}),
		writeSem:  make(chan struct{}, 1),
		pending:   map[uint64]chan rawReply{},
	}
	t.conn.Store(c)
	if stderr != nil {
		go func() {
			_, _ = io.Copy(errDst, stderr)
			stderr.Close()
		}()
	}
	go c.wait(stderr)
	go c.readLoop()
	return c, nil
}

// wait reaps the child as soon as it exits, then lets the reads of its
// output run on for exitDrain at most.
func (c *StdioConn) wait(stderr *os.File) {
	c.waitErr = c.cmd.Wait()
	if c.exited != nil {
		c.exited()
	}
	close(c.reaped)
	c.closeStdin() // nobody reads it any more
	deadline := time.Now().Add(exitDrain)
	_ = c.stdout.SetReadDeadline(deadline)
	if stderr != nil {
		_ = stderr.SetReadDeadline(deadline)
	}
}

// Conn is the connection Connect made, nil before.
func (t *StdioTransport) Conn() *StdioConn { return t.conn.Load() }

// StdioConn is an mcp.Connection over a child's pipes that also carries raw
// tool calls (CallTool). Both kinds of write share one mutex, so lines never
// interleave; one goroutine reads the child's lines, hands responses to raw
// calls to their waiters and decodes everything else for go-sdk.
type StdioConn struct {
	cmd       *exec.Cmd
	exited    func() // nil or the transport's, after Wait
	kill      func() // nil or the transport's
	stdin     *os.File
	stdinOnce sync.Once
	stdinErr  error
	stdout    *os.File
	terminate time.Duration
	maxLine   int

	// writeSem (one slot) keeps lines from interleaving; a writer waits
	// for it only as long as its context lets it.
	writeSem chan struct{}

	incoming  chan msgOrErr // messages for go-sdk, from readLoop
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error

	// broken closes when a write finds the server's input closed: Read
	// returns brokenErr, so go-sdk's session ends (the runner's crash path).
	broken     chan struct{}
	brokenOnce sync.Once
	brokenErr  error
	epipe      atomic.Bool // a write met EPIPE (inputClosed runs)

	// connected is set by Launched.Connected, once the start is over:
	// before, Close ends the child at once (a failed handshake).
	connected atomic.Bool

	reaped  chan struct{} // closed once the child has been waited for
	waitErr error         // its Wait's, set before reaped closes

	mu      sync.Mutex
	pending map[uint64]chan rawReply // raw calls waiting, by id number
	failed  error                    // set once the connection is unusable: why

	nextID   atomic.Uint64
	reqMeta  requestMeta
	progress progressCount
}

type msgOrErr struct {
	msg jsonrpc.Message
	err error
}

type rawReply struct {
	result []byte
	err    error
}

// Read returns the next message for go-sdk. Close unblocks it.
func (c *StdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case v := <-c.incoming:
		c.progress.note(v.msg)
		return v.msg, v.err
	case <-c.closed:
		return nil, io.EOF
	case <-c.broken:
		return nil, c.brokenErr
	}
}

// Write sends one of go-sdk's messages.
func (c *StdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("marshaling message: %v", err)
	}
	c.reqMeta.observe(msg)
	return c.writeLine(ctx, append(data, '\n'))
}

// writeLine writes one whole line, one writer at a time, within ctx: a
// server that reads no more (frozen, or its pipe full) fills the pipe and
// would hold the writer, and every writer behind it, for ever. A line cut
// by ctx's end after part of it was written leaves the stream broken: the
// connection fails and the server's input is closed (it sees EOF).
func (c *StdioConn) writeLine(ctx context.Context, line []byte) error {
	select {
	case c.writeSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closed:
		return os.ErrClosed
	}
	defer func() { <-c.writeSem }()
	if err := ctx.Err(); err != nil {
		return err
	}
	timedOut := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = c.stdin.SetWriteDeadline(time.Now())
		close(timedOut)
	})
	n, err := c.stdin.Write(line)
	if !stop() {
		<-timedOut
		_ = c.stdin.SetWriteDeadline(time.Time{})
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		if n > 0 {
			c.fail(fmt.Errorf("%w: a message to the server was cut off: it reads its input no more", mcp.ErrConnectionClosed))
			c.closeStdin()
		}
		return fmt.Errorf("writing to the server: %w", ctx.Err())
	}
	if errors.Is(err, syscall.EPIPE) {
		err = fmt.Errorf("%w: the server closed its input", mcp.ErrConnectionClosed)
		if c.epipe.CompareAndSwap(false, true) {
			go c.inputClosed(err)
		}
	}
	return err
}

// epipeWait is how long a write that found the server's input closed waits
// for the server's exit before it fails the connection itself: a server
// that exited closed its input too, and its exit says better what happened.
const epipeWait = 250 * time.Millisecond

// inputClosed fails the connection of a server that closed its input but
// runs on: nothing it is sent arrives any more, and its health pings would
// take minutes to tell.
func (c *StdioConn) inputClosed(err error) {
	t := time.NewTimer(epipeWait)
	defer t.Stop()
	select {
	case <-c.reaped:
	case <-c.closed:
	case <-t.C:
		c.breakConn(err)
	}
}

// breakConn fails the connection for good (the first reason sticks): raw
// calls fail with err, and go-sdk's next Read returns it, which ends the session.
func (c *StdioConn) breakConn(err error) {
	c.fail(err)
	c.brokenOnce.Do(func() {
		c.brokenErr = err
		close(c.broken)
	})
}

// closeStdin closes the server's input once (Close, the child's exit, a cut line).
func (c *StdioConn) closeStdin() error {
	c.stdinOnce.Do(func() { c.stdinErr = c.stdin.Close() })
	return c.stdinErr
}

// SessionID is empty: stdio has no session ids.
func (c *StdioConn) SessionID() string { return "" }

// Close fails every waiting raw call and ends the child as
// mcp.CommandTransport did: close stdin, wait TerminateDuration, SIGTERM, wait,
// SIGKILL. (The runner's Process.Stop signals the whole group sooner, in
// parallel.) A connection that broke (see breakConn), or one closed before
// Launched.Connected (a failed start: go-sdk closes it itself when the
// handshake fails), ends the child at once instead: waiting for it to exit
// would only delay the error it reports.
func (c *StdioConn) Close() error {
	c.closeOnce.Do(func() {
		c.fail(fmt.Errorf("%w: the connection to the server was closed", mcp.ErrConnectionClosed))
		close(c.closed)
		c.closeErr = c.stop()
	})
	return c.closeErr
}

func (c *StdioConn) stop() error {
	// Spec: close the child's input, wait for it to exit, SIGTERM, then SIGKILL.
	stdinErr := c.closeStdin()
	select {
	case <-c.broken:
		return c.killNow()
	default:
	}
	if !c.connected.Load() && c.kill != nil {
		return c.killNow()
	}
	wait := func() (error, bool) {
		t := time.NewTimer(c.terminate)
		defer t.Stop()
		select {
		case <-c.reaped:
			return c.waitErr, true
		case <-t.C:
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return errors.Join(err, stdinErr)
	}
	// If SIGTERM cannot be sent, go straight on to SIGKILL.
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	return c.killNow()
}

// killNow kills the child (with kill, its group and descendants too) and
// waits for it to be reaped.
func (c *StdioConn) killNow() error {
	if c.kill != nil {
		c.kill()
	} else if err := c.cmd.Process.Kill(); err != nil {
		return err
	}
	t := time.NewTimer(c.terminate)
	defer t.Stop()
	select {
	case <-c.reaped:
		return c.waitErr
	case <-t.C:
		return fmt.Errorf("unresponsive subprocess")
	}
}

// fail makes the connection unusable for raw calls (the first reason
// sticks) and fails the waiting ones with it, at once.
func (c *StdioConn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = err
	}
	for id, ch := range c.pending {
		ch <- rawReply{err: c.failed}
		delete(c.pending, id)
	}
}

// longLineKeep is the largest line buffer kept for the next long line; a
// bigger one (a result of many MiB) is given back after use.
const longLineKeep = 4 << 20

// readLoop reads the child's lines until its stdout ends: a response to a raw
// call goes to its waiter, anything else is decoded for go-sdk's Read.
func (c *StdioConn) readLoop() {
	defer c.stdout.Close()
	br := bufio.NewReaderSize(c.stdout, 64<<10)
	var long []byte
	for {
		line, err := readLine(br, &long, c.maxLine)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// Set by wait: the child exited, something it started holds its output.
				c.fail(fmt.Errorf("%w: the server exited (a process it started still holds its output)", mcp.ErrConnectionClosed))
				c.deliver(msgOrErr{err: io.EOF})
				return
			}
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				c.fail(fmt.Errorf("%w: the server closed its output (it exited)", mcp.ErrConnectionClosed))
				c.deliver(msgOrErr{err: io.EOF})
				return
			}
			c.fail(fmt.Errorf("%w: reading from the server: %v", mcp.ErrConnectionClosed, err))
			c.deliver(msgOrErr{err: err})
			return
		}
		if cap(long) > longLineKeep {
			long = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if line[0] == '[' {
			if !c.batch(line) {
				return
			}
			continue
		}
		if c.route(line) {
			continue
		}
		msg, err := jsonrpc.DecodeMessage(line)
		if err != nil {
			// As go-sdk's own stdio connection does: a message it cannot read ends the connection.
			c.fail(fmt.Errorf("%w: the server sent an unreadable message: %v", mcp.ErrConnectionClosed, err))
			c.deliver(msgOrErr{err: err})
			return
		}
		if !c.deliver(msgOrErr{msg: msg}) {
			return
		}
	}
}

// batch handles a JSON-RPC batch (an array of messages) element by element.
func (c *StdioConn) batch(line []byte) bool {
	var elems []json.RawMessage
	err := json.Unmarshal(line, &elems)
	if err == nil && len(elems) == 0 {
		err = errors.New("empty batch")
	}
	for _, e := range elems {
		if err != nil {
			break
		}
		if c.route(e) {
			continue
		}
		var msg jsonrpc.Message
		if msg, err = jsonrpc.DecodeMessage(e); err == nil && !c.deliver(msgOrErr{msg: msg}) {
			return false
		}
	}
	if err != nil {
		c.fail(fmt.Errorf("%w: the server sent an unreadable batch: %v", mcp.ErrConnectionClosed, err))
		c.deliver(msgOrErr{err: err})
		return false
	}
	return true
}

// deliver hands v to go-sdk's Read; false once the connection is closed.
func (c *StdioConn) deliver(v msgOrErr) bool {
	select {
	case c.incoming <- v:
		return true
	case <-c.closed:
		return false
	}
}

// readLine returns the next line, valid until the next call. Short lines are
// read in place from br's buffer; a longer one is gathered in *long, which is
// reused from line to line.
func readLine(br *bufio.Reader, long *[]byte, max int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case err == nil:
		return line, nil
	case err == io.EOF && len(line) > 0: // a last line without newline
		return line, nil
	case err != bufio.ErrBufferFull:
		return nil, err
	}
	buf := append((*long)[:0], line...)
	for {
		if len(buf) > max {
			*long = nil
			return nil, fmt.Errorf("a message from the server is over the limit of %d bytes", max)
		}
		line, err = br.ReadSlice('\n')
		buf = append(buf, line...)
		if err == nil || (err == io.EOF && len(buf) > 0) {
			*long = buf
			return buf, nil
		}
		if err != bufio.ErrBufferFull {
			return nil, err
		}
	}
}

func orDefaultDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
