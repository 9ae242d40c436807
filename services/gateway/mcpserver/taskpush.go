package mcpserver

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/model"
)

// notifications/tasks/status (2025-11-25) to the session that made a task,
// when the task ends. go-sdk v1.8.0 cannot send a notification it does not
// know, so the gateway writes it on the session's GET stream itself, between
// go-sdk's own events (each of which go-sdk writes whole, in one Write).
// While no GET stream is open the notifications wait, a few per session, for
// the next one. Final states come from the runners' task events
// (events.task.<id>, one core subscription per gateway instance); the spec
// makes these pushes optional for the client to rely on, and tasks/get
// stays the truth. The same events carry a working task's progress, sent
// as notifications/progress (taskprogress.go).

// maxPendingPushes bounds the notifications a session without a GET stream keeps.
const maxPendingPushes = 64

// taskPushes maps the tasks made by sessions of this instance to them.
type taskPushes struct {
	mu     sync.Mutex
	sub    *nats.Subscription
	nc     *nats.Conn
	status chan nats.Status // the connection coming back (recheck)
	byID   map[string]*taskWatch
}

// taskWatch is a task a session made, and its progress sent so far.
type taskWatch struct {
	ls    *liveSession
	ctx   context.Context // the creating request's values (its principal), for asking again
	token json.RawMessage // the call's progressToken; nil: no progress wanted
	sent  bool            // a progress notification went out
	last  float64         // the progress it carried
}

// watch starts following task id for ls: its end is pushed to ls, and its
// progress when token (the call's progressToken) is set. ctx is the
// creating request's (its principal reads the task).
func (p *taskPushes) watch(ctx context.Context, a *Aggregator, ls *liveSession, id string, token json.RawMessage) {
	p.mu.Lock()
	if p.sub == nil {
		sub, err := a.nc.Subscribe(a.client.Subjects().EventsOf("task"), func(m *nats.Msg) {
			var t model.Task
			if json.Unmarshal(m.Data, &t) != nil {
				return
			}
			if model.TaskFinal(t.State) {
				p.ended(t)
			} else if t.Progress != nil {
				p.progressed(t)
			}
		})
		if err != nil {
			p.mu.Unlock()
			a.log.Warn("task status pushes are off: subscribing to task events failed", "error", err)
			return
		}
		p.sub = sub
		// A task that ended while the connection was down sent its event
		// to no one: ask again for every task followed once it is back.
		p.nc, p.status = a.nc, a.nc.StatusChanged(nats.CONNECTED)
		go func(back chan nats.Status) {
			for range back { // closed by close()
				p.recheck(a)
			}
		}(p.status)
	}
	if p.byID == nil {
		p.byID = map[string]*taskWatch{}
	}
	p.byID[id] = &taskWatch{ls: ls, token: token, ctx: context.WithoutCancel(ctx)}
	p.mu.Unlock()
	// A task that ended before the subscription saw it: ask once.
	go p.ask(ctx, a, id)
}

// ask pushes task id's end if it has ended (as a principal allowed to read
// it: ctx's).
func (p *taskPushes) ask(ctx context.Context, a *Aggregator, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if t, err := a.client.Task(ctx, id); err == nil && model.TaskFinal(t.State) {
		p.ended(t)
	}
}

// recheck asks for every task followed (the connection came back).
func (p *taskPushes) recheck(a *Aggregator) {
	p.mu.Lock()
	watched := make(map[string]context.Context, len(p.byID))
	for id, w := range p.byID {
		watched[id] = w.ctx
	}
	p.mu.Unlock()
	for id, ctx := range watched {
		go p.ask(ctx, a, id)
	}
}

// ended pushes t to the session that made it, once; no progress follows.
func (p *taskPushes) ended(t model.Task) {
	p.mu.Lock()
	w := p.byID[t.ID]
	delete(p.byID, t.ID)
	p.mu.Unlock()
	if w == nil || w.ls.closed() {
		return
	}
	ls := w.ls
	params, err := json.Marshal(toV1(t))
	if err != nil {
		return
	}
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Request{Method: "notifications/tasks/status", Params: params})
	if err != nil {
		return
	}
	ls.push.send(t.ID, data)
}

// forget drops the tasks of sessions that have closed.
func (p *taskPushes) forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, w := range p.byID {
		if w.ls.closed() {
			delete(p.byID, id)
		}
	}
}

func (p *taskPushes) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
		p.sub = nil
	}
	if p.status != nil {
		p.nc.RemoveStatusListener(p.status)
		p.status = nil
	}
}

// sessionPush is a session's channel for the gateway's own notifications:
// the GET stream go-sdk serves, when open, else a short queue. They are
// written from the session's own goroutine (relay): the task events of every
// session come through one NATS callback, and a stream that is not read
// would hold it up to the write deadline, and every other key's
// notifications with it. What waits is bounded: at most maxPendingPushes
// task statuses, and the newest progress of each task (of as many tasks).
type sessionPush struct {
	mu       sync.Mutex
	stream   *pushWriter
	pending  [][]byte          // task statuses, oldest first, kept for the next stream
	progress map[string][]byte // by task: the newest progress, for the open stream only
	relay    relay
}

// send writes task's status (one JSON-RPC message) as an SSE event on the
// open stream, or on the next one; it supersedes the task's progress not
// yet written.
func (s *sessionPush) send(task string, msg []byte) {
	s.mu.Lock()
	delete(s.progress, task)
	if len(s.pending) < maxPendingPushes {
		s.pending = append(s.pending, msg)
	}
	s.mu.Unlock()
	s.relay.kick(s.deliver)
}

// sendLive writes task's progress (one JSON-RPC message) on the open stream
// only, replacing any not yet written: without a stream it is dropped (of
// progress only the newest matters).
func (s *sessionPush) sendLive(task string, msg []byte) {
	s.mu.Lock()
	if _, ok := s.progress[task]; s.stream == nil || !ok && len(s.progress) >= maxPendingPushes {
		s.mu.Unlock()
		return
	}
	if s.progress == nil {
		s.progress = map[string][]byte{}
	}
	s.progress[task] = msg
	s.mu.Unlock()
	s.relay.kick(s.deliver)
}

// deliver writes what waits on the stream, progress first (a task's
// status, which ends it, comes after); statuses the stream could not take
// wait for the next one. It writes outside s.mu, which senders take.
func (s *sessionPush) deliver() {
	s.mu.Lock()
	pw, progress, statuses := s.stream, s.progress, s.pending
	s.progress, s.pending = nil, nil
	s.mu.Unlock()
	for _, task := range slices.Sorted(maps.Keys(progress)) {
		if pw == nil || !pw.write(progress[task]) {
			break
		}
	}
	for i, msg := range statuses {
		if pw == nil || !pw.write(msg) {
			s.mu.Lock()
			s.pending = append(statuses[i:len(statuses):len(statuses)], s.pending...)
			s.pending = s.pending[:min(len(s.pending), maxPendingPushes)]
			s.mu.Unlock()
			return
		}
	}
}

// attach wraps the ResponseWriter of the session's GET stream; the returned
// func detaches it when go-sdk is done with it.
func (s *sessionPush) attach(w http.ResponseWriter) (http.ResponseWriter, func()) {
	pw := &pushWriter{ResponseWriter: w, owner: s}
	s.mu.Lock()
	s.stream = pw
	s.mu.Unlock()
	return pw, func() {
		s.mu.Lock()
		if s.stream == pw {
			s.stream = nil
		}
		s.mu.Unlock()
		pw.mu.Lock()
		pw.gone = true
		pw.mu.Unlock()
	}
}

// pushWriter serializes go-sdk's writes on a GET stream with the gateway's
// events. Nothing is written before go-sdk has sent the stream's headers.
type pushWriter struct {
	http.ResponseWriter
	owner *sessionPush
	mu    sync.Mutex
	open  bool // go-sdk answered 200 with its event stream
	gone  bool // go-sdk returned: the stream is over
}

func (p *pushWriter) WriteHeader(code int) {
	p.mu.Lock()
	p.ResponseWriter.WriteHeader(code)
	p.open = code == http.StatusOK
	p.mu.Unlock()
	if p.open { // what waited for a stream goes out
		p.owner.relay.kick(p.owner.deliver)
	}
}

func (p *pushWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ResponseWriter.Write(b)
}

func (p *pushWriter) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = http.NewResponseController(p.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (p *pushWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// write puts one message on the stream as an SSE event; false when the
// stream cannot take it (not open yet, or over).
func (p *pushWriter) write(msg []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.open || p.gone {
		return false
	}
	frame := make([]byte, 0, len(msg)+len("event: message\ndata: \n\n"))
	frame = append(frame, "event: message\ndata: "...)
	frame = append(frame, msg...)
	frame = append(frame, "\n\n"...)
	if _, err := p.ResponseWriter.Write(frame); err != nil {
		return false
	}
	_ = http.NewResponseController(p.ResponseWriter).Flush()
	return true
}
