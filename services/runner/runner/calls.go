package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/deadline"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/libs/toolargs"
	"github.com/mcpbus/mcpbus/services/runner/internal/launch"
)

const tracerName = "github.com/mcpbus/mcpbus/services/runner"

// serve registers the server's own micro service: its call, rpc, control and
// cancel endpoints. Replicas share calls through the queue group mcp.<slug>.
func (s *server) serve() error {
	svc, err := bus.StartService(s.r.nc, bus.ServiceConfig{
		Name:        ServerServiceName,
		Version:     Version,
		Description: "MCP server " + s.slug,
		Metadata:    map[string]string{"server": s.slug, "runner": s.r.opts.ID},
		QueueGroup:  bus.QueueGroup(s.slug),
		Logger:      s.log,
		Endpoints: s.r.ownReplies([]bus.Endpoint{
			// Local: the gateway in this process (mcpbus up) hands calls over without NATS.
			{Name: "call", Subject: s.r.subj.CallAll(s.slug), Handler: s.async(s.handleCall), Local: true},
			{Name: "rpc", Subject: s.r.subj.RPC(s.slug), Handler: s.async(s.handleRPC)},
			{Name: "control", Subject: s.r.subj.Control(s.slug), Handler: s.async(s.handleControl)},
			// Every replica hears start, stop and restart: they mean the
			// server, not the one replica the queue group would pick.
			{Name: "control-all", Subject: s.r.subj.ControlAll(s.slug), Handler: s.async(s.handleControl), Broadcast: true},
			// Every replica hears a cancellation; the one running the request acts on it.
			{Name: "cancel", Subject: s.r.subj.Cancel(s.slug), Handler: micro.HandlerFunc(s.handleCancel), Broadcast: true},
			// The same requests of agents, under their own prefixes.
			{Name: "agent-call", Subject: s.r.subj.AgentCallAll(s.slug), Handler: s.async(s.handleCall)},
			{Name: "agent-rpc", Subject: s.r.subj.AgentRPC(s.slug), Handler: s.async(s.handleRPC)},
			{Name: "agent-cancel", Subject: s.r.subj.AgentCancel(s.slug), Handler: micro.HandlerFunc(s.handleCancel), Broadcast: true},
		}),
	})
	if err != nil {
		return fmt.Errorf("server %s: %w", s.slug, err)
	}
	s.svc = svc
	go s.runTasks()
	return nil
}

// async runs h on a goroutine of the runner's pool, so calls never queue
// behind each other in the subscription, and turns a panic into an
// INTERNAL_ERROR reply instead of a dead runner. A request handed over in
// process (bus.RequestLocal) runs on its requester's goroutine instead,
// which only waits for the reply: two goroutine wake-ups less a call. Its
// handler ends with the requester's context (handleCall), so the requester
// still returns at its deadline.
func (s *server) async(h func(micro.Request)) micro.HandlerFunc {
	return func(req micro.Request) {
		run := func() {
			defer func() {
				if p := recover(); p != nil {
					s.log.Error("handler panic", "subject", req.Subject(), "panic", fmt.Sprint(p))
					_ = bus.RespondError(req, apierr.New(apierr.Internal, "internal error"))
				}
			}()
			h(req)
		}
		if _, local := bus.RequesterContext(req); local {
			run()
			return
		}
		if s.r.workers.Submit(run) != nil { // the pool is released: the runner is stopping
			go run()
		}
	}
}

// afterReply runs f, work of a request whose reply is sent: at once, or on
// the pool for a request running on its in-process requester's goroutine
// (async), which the handler would otherwise hold until f is done.
func (s *server) afterReply(req micro.Request, f func()) {
	if _, local := bus.RequesterContext(req); !local || s.r.workers.Submit(f) != nil {
		f()
	}
}

// liveSession is a running server's go-sdk session and the connection
// under it that carries raw tool calls.
type liveSession struct {
	*mcp.ClientSession
	raw launch.RawConn
	// secrets are the values of a principal's own session (their headers
	// and token), redacted from what its server's errors say.
	secrets *principalSecrets
	// gen is the generation of the server's session the call found
	// (live): its failure is told apart from a restart in place's cut by it.
	gen uint64
}

// live returns the session and the tool for a call, or the error to answer;
// errIdle when the server must be started first.
func (s *server) live(token string) (liveSession, *mcp.Tool, *model.McpConfig, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var none liveSession
	if s.sess == nil {
		switch {
		case s.state == model.StateIdle || s.state == model.StateStarting ||
			(s.state == model.StateStopped && !s.booted): // taken, boot still to come
			if t, ok := s.tools[token]; token != "" && (!ok || !s.cfg.Tools.Allows(t.Name)) && s.state == model.StateIdle {
				return none, nil, nil, apierr.Newf(apierr.NotFound, "server %s has no tool %q", s.slug, token)
			}
			return none, nil, s.cfg, errIdle
		case s.state == model.StateError && s.lastErr != nil && s.lastErr.Code == apierr.Unauthorized:
			return none, nil, nil, s.lastErr // "Authentication failed. Check your API key."
		case s.state == model.StateError && s.lastErr != nil && errors.Is(s.lastErr, errAtLimit):
			// Refused at the runner's server limit: the call tries to
			// start it again, there may be room now.
			return none, nil, s.cfg, errIdle
		case s.state == model.StateError && s.lastErr != nil && !s.retryAt.IsZero():
			// A call that reached the runner before the gateway saw the
			// crash: the same advice the gateway gives (restarts.Restarting).
			return none, nil, nil, apierr.Newf(apierr.ServiceUnavailable, "server %s is restarting after a crash (%s); retry after %d s",
				s.slug, s.lastErr.Message, model.RetryAfterSeconds(time.Until(s.retryAt)))
		case s.state == model.StateError && s.lastErr != nil:
			return none, nil, nil, apierr.Newf(apierr.ServiceUnavailable, "server %s is in error: %s", s.slug, s.lastErr.Message)
		case s.state == model.StateStarting:
			return none, nil, nil, apierr.Newf(apierr.ServiceUnavailable, "server %s is starting", s.slug)
		}
		return none, nil, nil, apierr.Newf(apierr.ServiceUnavailable, "server %s is %s", s.slug, s.state)
	}
	sess := liveSession{ClientSession: s.sess, raw: s.raw, gen: s.gen}
	if token == "" {
		return sess, nil, s.cfg, nil
	}
	t, ok := s.tools[token]
	if !ok || !s.cfg.Tools.Allows(t.Name) { // filtered tools are refused like unknown ones
		return none, nil, nil, apierr.Newf(apierr.NotFound, "server %s has no tool %q", s.slug, token)
	}
	return sess, t, s.cfg, nil
}

// handleCall serves mcp.v1.call.<slug>.<tool>: the body is the tool's
// arguments, passed through as raw JSON; the reply is the CallToolResult.
func (s *server) handleCall(req micro.Request) {
	start := time.Now()
	h := nats.Header(req.Headers())
	ctx, span := bus.ProcessSpan(s.ctx, req)
	c, subject, err := s.r.admitted(req.Subject()) // refused before it is an event
	if err != nil {
		bus.EndProcess(span, err)
		_ = bus.RespondError(req, err)
		return
	}
	token := ""
	if len(subject) > len(s.callPrefix) {
		token = subject[len(s.callPrefix):]
	}
	for _, name := range []string{bus.HeaderProgressSubject, bus.HeaderClientSubject} {
		if subj := h.Get(name); subj != "" && !bus.UnderReplyPrefix(req.Reply(), subj) {
			err := apierr.Invalid(name, name+" must be under the caller's own reply prefix (an inbox of the caller)")
			bus.EndProcess(span, err)
			_ = bus.RespondError(req, err)
			return
		}
	}
	if len(token) > model.MaxTokenLen {
		// No tool has such a token: refused before it is an event, whose
		// tool a caller would otherwise fill with up to 4 KiB of subject.
		err := apierr.Newf(apierr.NotFound, "server %s has no tool with a token of %d bytes (at most %d)", s.slug, len(token), model.MaxTokenLen)
		bus.EndProcess(span, err)
		_ = bus.RespondError(req, err)
		return
	}
	if len(h.Get(bus.HeaderRequestID)) > bus.MaxRequestID {
		err := apierr.Invalid(bus.HeaderRequestID, fmt.Sprintf("%s is longer than %d bytes", bus.HeaderRequestID, bus.MaxRequestID))
		bus.EndProcess(span, err)
		_ = bus.RespondError(req, err)
		return
	}
	if subj := h.Get(bus.HeaderClientSubject); subj != "" {
		who, _ := s.r.callerPrincipal(c, h) // as principalOf: an unreadable header is the operator's
		ctx = withClientTarget(ctx, &clientTarget{subject: subj, requestID: h.Get(bus.HeaderRequestID), principal: who})
	}
	if d, ok := bus.Vouched(req); ok {
		ctx = context.WithValue(ctx, vouchedKey{}, &d)
	}
	if strings.EqualFold(h.Get(bus.HeaderTask), "true") {
		err := s.callAsTask(ctx, c, h, token, req)
		bus.EndProcess(span, err)
		return
	}
	if rc, local := bus.RequesterContext(req); local {
		// The requester in this process gives up: the call ends with it, as
		// the cancel message of a bus caller ends it.
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		stop := context.AfterFunc(rc, func() { cancel(context.Cause(rc)) })
		defer func() { stop(); cancel(nil) }()
	}
	res, tool, err := s.call(ctx, c, h, token, req.Data())
	reqID := h.Get(bus.HeaderRequestID)
	hdr := micro.Headers{}
	if reqID != "" {
		hdr[bus.HeaderRequestID] = []string{reqID}
	}
	outcome, errText := s.callOutcome(res, err)
	switch {
	case err != nil:
		if errors.Is(err, bus.ErrNotRun) {
			hdr[bus.HeaderNotRun] = []string{"true"}
		}
		_ = bus.RespondError(req, err, micro.WithHeaders(hdr))
	default:
		switch {
		case !res.checked:
		case res.isError:
			hdr[bus.HeaderToolResult] = toolResultError
		default:
			hdr[bus.HeaderToolResult] = toolResultOK
		}
		if rerr := req.Respond(res.data, micro.WithHeaders(hdr)); rerr != nil {
			err = s.r.unsent(rerr, "the result of "+s.slug+"."+token, len(res.data))
			delete(hdr, bus.HeaderToolResult)
			_ = bus.RespondError(req, err, micro.WithHeaders(hdr))
			outcome, errText = "error", s.eventError(err)
		}
	}
	s.count(outcome)
	if tool == "" {
		tool = token
	}
	// The rest is bookkeeping the caller need not wait for: on the in-process
	// hand-off it runs after the reply, in the pool.
	end := time.Now()
	s.afterReply(req, func() {
		bus.EndProcess(span, err, trace.WithTimestamp(end))
		s.recordCall(ctx, c, h, tool, traceID(span), start, end, res, err, outcome, errText)
	})
}

// callOutcome is a call's outcome as its event says it (ok, tool_error,
// error, timeout, cancelled) and the text of its error.
func (s *server) callOutcome(res callReply, err error) (outcome, errText string) {
	switch {
	case err == nil && res.isError:
		return "tool_error", ""
	case err == nil:
		return "ok", ""
	case errors.Is(err, context.Canceled):
		return "cancelled", s.eventError(err)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout", s.eventError(err)
	}
	return "error", s.eventError(err)
}

// count adds a call of outcome to the server's status counts.
func (s *server) count(outcome string) {
	s.calls.Add(1)
	if outcome != "ok" && outcome != "tool_error" {
		s.errs.Add(1)
	}
}

// recordCall publishes a call's event, which the audit chain gets too:
// every way a call reaches the runner (a bus request, a durable task's run)
// records one.
func (s *server) recordCall(ctx context.Context, c caller, h nats.Header, tool, tid string, start, end time.Time, res callReply, err error, outcome, errText string) {
	reqID := h.Get(bus.HeaderRequestID)
	ev := model.CallEvent{
		Server: s.slug, Tool: tool, RequestID: reqID, TraceID: tid,
		Outcome: outcome, Code: string(apierr.Of(err)), Error: errText, DurationMS: float64(end.Sub(start).Microseconds()) / 1000,
		At: start.UTC(), Runner: s.r.opts.ID, Caller: c.label(), Principal: s.r.principalOf(ctx, c, h),
		Secrets: res.secrets, NotRun: errors.Is(err, bus.ErrNotRun),
	}
	s.r.publishCall(ctx, ev)
	for _, f := range res.secrets { // the rule and the place, never the value
		s.log.Warn("secret found in a call", "tool", tool, "where", f.Where, "rule", f.Rule, "action", f.Action, "request_id", reqID)
	}
}

// vouchedKey carries the schema digest a gateway in this process vouched
// for a call's arguments with (bus.Vouched).
type vouchedKey struct{}

// principalOf is the id of the principal a call is made for: the agent its
// subject names, else the one the gateway or the chat service put in its
// header ("" without one: the operator or a service of its own accord). It
// names the span's enduser.id too.
func (r *Runner) principalOf(ctx context.Context, c caller, h nats.Header) string {
	id, err := r.callerPrincipal(c, h)
	if err != nil || id == "" {
		return ""
	}
	principal.Tag(ctx, principal.Principal{ID: id})
	return id
}

// eventError is the message of a failed call as its call event carries it.
// Events reach more readers than the caller (every agent may follow them),
// and the message may quote the server (a JSON-RPC error's text): the
// server's known secrets are redacted first, then the message is made one
// line and cut to model.CallEventErrorMax characters.
func (s *server) eventError(err error) string {
	return s.eventText(apierr.From(err).Message, model.CallEventErrorMax)
}

// eventText is a server's text made fit for events: redacted, one line, at
// most limit characters.
func (s *server) eventText(text string, limit int) string {
	return model.OneLine(s.redact(text), limit)
}

// callReply is a call's answer: the CallToolResult as JSON, its isError, and
// whether it is checked well-formed (an object with a content array), which
// the reply then says in bus.HeaderToolResult.
type callReply struct {
	data    []byte
	isError bool
	checked bool
	secrets []model.SecretFound // what the secrets policy found and did (secrets.go)
}

// Values of bus.HeaderToolResult, shared by every reply (headers are only read).
var (
	toolResultOK    = []string{bus.ToolResultOK}
	toolResultError = []string{bus.ToolResultError}
)

func (s *server) call(ctx context.Context, c caller, h nats.Header, token string, args []byte) (callReply, string, error) {
	if err := checkArgs(args, s.r.opts.MaxArgsBytes); err != nil {
		return callReply{}, "", err
	}
	if !s.callerMayCall(c, token) {
		return callReply{}, "", apierr.Newf(apierr.NotFound, "server %s has no tool %q", s.slug, token)
	}
	if !s.leaseLive() {
		// Lapsed (this runner was frozen or starved), not yet given up:
		// another runner may run the server now.
		return callReply{}, "", s.notRun()
	}
	if st := s.r.approvals; st != nil && st.Enforcing() && !s.knows(token) {
		// The rules name a tool as its catalog or its server does, not by
		// its subject token (files.remove is files_remove_<hash> there): a
		// tool not known yet (the server starting, or never started here)
		// is decided once the start has brought its name in. A failed
		// start is met again below.
		_, _, _, _ = s.liveOrStart(ctx, h, token)
	}
	// A withheld tool's call is refused whatever the rules say: asked
	// first, a person would approve a call that is then refused anyway.
	if why, name := s.withheldTool(token); why != "" {
		return callReply{data: toolargs.Result(apierr.New(apierr.Validation, why)), isError: true}, name, nil
	}
	// Before any share or slot is taken: a held call waits for a person.
	if err := s.approve(ctx, c, h, token, args); err != nil {
		return callReply{}, "", err
	}
	release, err := s.takeShare(c)
	if err != nil {
		return callReply{}, "", err
	}
	defer release()
	n := s.active.Add(1)
	defer func() {
		s.active.Add(-1)
		s.lastUse.Store(time.Now().UnixNano())
	}()
	sess, tool, cfg, err := s.liveOrStart(ctx, h, token)
	if err != nil {
		if s.ctx.Err() != nil {
			// Let go meanwhile (a handover, or a lease that lapsed while
			// this runner was cut off or frozen): the call came through a
			// subscription that outlived the server and never reached it.
			// Another runner may own the server now: the caller may send
			// the call again (bus.ErrNotRun) instead of failing on an
			// error such as "server s is running".
			return callReply{}, "", s.notRun()
		}
		return callReply{}, "", err
	}
	if !c.allows(s.slug, tool) { // a lazy start may have brought the tool in
		return callReply{}, "", apierr.Newf(apierr.NotFound, "server %s has no tool %q", s.slug, token)
	}
	gen := sess.gen
	sess, unuse, err := s.sessionFor(ctx, c, h, sess, cfg)
	if err != nil {
		return callReply{}, tool.Name, err
	}
	defer unuse()
	if max := maxInflight(cfg, s.r.opts.MaxInflight); n > int64(max) {
		return callReply{}, tool.Name, inflightFull{apierr.Newf(apierr.ServiceUnavailable, "server %s already runs %d calls, its limit (runtime.max_inflight); try again shortly", s.slug, max)}
	}
	timeout := cfg.Runtime.CallTimeout.Or(s.r.opts.CallTimeout)
	if tt, ok := ctx.Value(taskTimeoutKey{}).(time.Duration); ok {
		timeout = tt
	}
	// A call given up stays in doubt this long (inDoubt): the longest the
	// server is let run a call of this kind, whatever the caller's own
	// limit, which the server never learns.
	doubt := timeout
	if ct := bus.CallerTimeout(h); ct > 0 && ct < timeout {
		timeout = ct
	}
	// The time the caller's person takes to answer the server's request for
	// input does not count (relay pauses it).
	ctx, cancel := deadline.WithTimeout(ctx, timeout)
	defer cancel()

	if len(trimJSONSpace(args)) == 0 {
		args = emptyObject
	}
	s.mu.RLock()
	why := s.withheldLocked(token)
	s.mu.RUnlock()
	if why != "" {
		return callReply{data: toolargs.Result(apierr.New(apierr.Validation, why)), isError: true}, tool.Name, nil
	}
	vouched, _ := ctx.Value(vouchedKey{}).(*[sha256.Size]byte)
	if bad := s.schemas.check(tool, args, vouched); bad != nil {
		return callReply{data: toolargs.Result(bad), isError: true}, tool.Name, nil
	}
	// Secrets in the arguments are blocked (or redacted) before the server
	// sees them; the result's are checked on both paths below.
	args, argSecrets, refusal := s.r.secrets.checkArguments(cfg, args)
	if refusal != nil {
		return callReply{data: refusal, isError: true, checked: true, secrets: argSecrets}, tool.Name, nil
	}
	scanned := func(res callReply) callReply {
		s.r.secrets.checkResult(cfg, &res)
		res.secrets = append(argSecrets, res.secrets...)
		return res
	}
	reqID := h.Get(bus.HeaderRequestID)
	if reqID != "" {
		key := c.inflightKey(reqID)
		s.inflight.Store(key, cancel)
		defer s.inflight.Delete(key)
	}
	progressSubj := h.Get(bus.HeaderProgressSubject)
	// A task's run records its call's progress (taskprogress.go).
	record, _ := ctx.Value(taskProgressKey{}).(func(model.ProgressEvent))
	progress := (progressSubj != "" || record != nil) && reqID != ""
	// A call whose server requests are relayed goes through go-sdk, which
	// fulfils multi round-trip input requests (the raw path would hand them back).
	target, relays := ctx.Value(clientTargetKey{}).(*clientTarget)
	if relays {
		target.limit = ctx // before the target is shared: a request may come on the session's context
	}
	// Every call counts, relayed or not: a request of the server's on an
	// older session goes to a caller only when its call is the session's
	// only one in flight (targetFor), and not while another principal's
	// call given up may still be the server's work.
	s.clients.enter(sess.ClientSession, target)
	who, _ := s.r.callerPrincipal(c, h)
	callCtx := ctx
	defer func() { s.clients.leave(sess.ClientSession, target, unanswered(callCtx, who, doubt)) }()
	if s.useRaw(sess, tool, progress || relays) {
		// A multi round-trip result is asked again through go-sdk: the first
		// round only asked for input, which go-sdk gathers and sends back.
		// So is a call to an HTTP session the server no longer knows (go-sdk
		// learns it and reports it as it always has).
		if res, name, err := s.callRaw(ctx, sess, cfg, tool.Name, args, timeout); err != errUseSession {
			if err != nil {
				if cut := s.restartCutError(ctx, gen, err); cut != nil {
					err = cut
				}
				return res, name, err
			}
			return scanned(s.schemas.conform(tool, res)), name, nil
		}
	}
	params := &mcp.CallToolParams{Name: tool.Name, Arguments: json.RawMessage(args)}
	if progress {
		// The token is the runner's own, one per call: request ids are the
		// callers' (two agents may both send "req-1"), and the server's
		// progress must reach only the call it is for.
		token := "mcpbus-progress-" + strconv.FormatUint(s.r.progressSeq.Add(1), 10)
		params.Meta = mcp.Meta{"progressToken": token}
		target := &progressTarget{subject: progressSubj, requestID: reqID, record: record, sess: sess.ClientSession,
			policy: cfg.SecretScan.ResultsPolicy()}
		s.progress.Store(token, target)
		defer s.progress.Delete(token)
		// go-sdk hands notifications to a queue of their own while the response
		// returns at once: let the queue catch up so that every progress
		// notification is published before the reply (NATS keeps that order).
		defer target.settle(s.progressCaughtUp(sess))
	}
	ctx, op := s.startOp(ctx, sess.ClientSession, cfg, "tools/call", tool.Name, conv.GenAIToolName.String(tool.Name), conv.OperationExecuteTool)
	if relays {
		target.setSpan(op.Span().SpanContext())
	}
	injectMeta(ctx, params)
	if s.r.telemetry.content && op.Span().IsRecording() {
		// Past the arguments policy (a blocked call never gets here), and
		// redacted as results are whatever that policy is: off lets the
		// server have the arguments, not the trace.
		op.Span().SetAttributes(conv.GenAIToolCallArguments.String(
			s.r.secrets.scrub(s.redact(string(params.Arguments.(json.RawMessage))), "the arguments were withheld")))
	}
	res, err := sess.CallTool(ctx, params)
	if err != nil {
		if e := refusedCredentials(err); e != nil {
			// The upstream or its token endpoint refused the credentials:
			// no call succeeds until someone authorizes again.
			s.post(func() { s.credentialsRefused(sess.ClientSession, e) })
			op.End(ctx, errType(e), e)
			return callReply{}, tool.Name, e
		}
		err = s.scrubError(callError(ctx, s.slug, tool.Name, timeout, err), sess.secrets.redactor())
		if cut := s.restartCutError(ctx, gen, err); cut != nil {
			err = cut
		}
		op.End(ctx, errType(err), err)
		return callReply{}, tool.Name, err
	}
	data, err := json.Marshal(res)
	if err != nil {
		err = apierr.Wrap(apierr.Internal, "encoding result", err)
		op.End(ctx, errType(err), err)
		return callReply{}, tool.Name, err
	}
	outcome := ""
	if res.IsError {
		outcome = conv.ToolError
	}
	if s.r.telemetry.content && op.Span().IsRecording() {
		if b, merr := json.Marshal(res.Content); merr == nil {
			// Recorded as the caller will get it: the scan redacts what it
			// finds (the result's own policy may withhold it instead).
			op.Span().SetAttributes(conv.GenAIToolCallResult.String(s.r.secrets.scrub(s.redact(string(b)), "the result was withheld")))
		}
	}
	op.End(ctx, outcome, nil)
	s.lastPing.Store(time.Now().UnixNano()) // an answered call is proof of life
	return scanned(s.schemas.conform(tool, callReply{data: data, isError: res.IsError, checked: res.Content != nil})), tool.Name, nil
}

var emptyObject = []byte("{}")

// inflightFull is the refusal of a call over max_inflight, which never
// reached the server: a task's run waits and tries again instead.
type inflightFull struct{ err *apierr.Error }

func (e inflightFull) Error() string { return e.err.Error() }
func (e inflightFull) Unwrap() error { return e.err }

// liveOrStart is live, starting an idle server first (lazy start), bounded by
// the start timeout and the caller's own deadline.
func (s *server) liveOrStart(ctx context.Context, h nats.Header, token string) (liveSession, *mcp.Tool, *model.McpConfig, error) {
	sess, tool, cfg, err := s.live(token)
	if err != errIdle {
		return sess, tool, cfg, err
	}
	wait := cfg.Runtime.StartTimeout.Or(s.r.opts.StartTimeout)
	if ct := bus.CallerTimeout(h); ct > 0 && ct < wait {
		wait = ct
	}
	sctx, cancel := context.WithTimeout(ctx, wait)
	err = s.ensureRunning(sctx)
	cancel()
	if err != nil {
		return liveSession{}, nil, nil, err
	}
	return s.live(token)
}

func maxInflight(cfg *model.McpConfig, def int) int {
	if cfg.Runtime.MaxInflight > 0 {
		return cfg.Runtime.MaxInflight
	}
	return def
}

// checkArgs accepts an empty body (no arguments) or one JSON object.
func checkArgs(args []byte, max int) error {
	if len(args) > max {
		return apierr.Invalid("arguments", fmt.Sprintf("arguments are %d bytes, over the limit of %d", len(args), max))
	}
	trimmed := trimJSONSpace(args)
	if len(trimmed) == 0 {
		return nil
	}
	if trimmed[0] != '{' || !json.Valid(trimmed) {
		return apierr.Invalid("arguments", "arguments must be a JSON object")
	}
	return nil
}

// trimJSONSpace trims the whitespace JSON allows around a value (not
// Unicode spaces such as U+00A0, which would make the body invalid JSON).
func trimJSONSpace(b []byte) []byte { return bytes.Trim(b, " \t\r\n") }

// callError maps a failed MCP request to the contract's runtime errors.
func callError(ctx context.Context, server, tool string, timeout time.Duration, err error) error {
	var wire *jsonrpc.Error
	var limited *apierr.Error
	switch {
	case errors.As(err, &limited) && limited.Code == apierr.RateLimited:
		return limited // the upstream's 429 (launch.HTTPConn)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return apierr.Wrap(apierr.Network, fmt.Sprintf("Tool call timed out after %s", timeout), err)
	case errors.Is(context.Cause(ctx), errServerClosed):
		return apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("server %s stopped during the call (the runner let it go or is shutting down), so the call may or may not have run", server), err)
	case errors.Is(ctx.Err(), context.Canceled):
		return apierr.Wrap(apierr.Network, "Tool call cancelled by the caller", err)
	case errors.Is(err, mcp.ErrConnectionClosed):
		return apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("server %s exited during the call", server), err)
	case errors.As(err, &wire):
		switch wire.Code {
		case jsonrpc.CodeInvalidParams:
			return apierr.Wrap(apierr.Validation, wire.Message, err).WithField("arguments")
		case jsonrpc.CodeMethodNotFound:
			return apierr.Wrap(apierr.NotFound, wire.Message, err)
		}
		// The server's answer, not an outage: 503 would tell callers to
		// retry what fails the same way every time.
		return apierr.Wrap(apierr.Internal, fmt.Sprintf("server %s answered the call of %s with an error (%d): %s", server, tool, wire.Code, wire.Message), err)
	}
	return apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("tool %s failed: %v", tool, err), err)
}

// notRun is the error of a call that reached the server after this runner
// let it go, before the MCP server saw it (bus.HeaderNotRun).
func (s *server) notRun() *apierr.Error {
	return apierr.Wrap(apierr.ServiceUnavailable,
		fmt.Sprintf("server %s is no longer served by runner %s (handed over, or its lease lapsed); the call did not run", s.slug, s.r.opts.ID), bus.ErrNotRun)
}

// errServerClosed is the cause of a server's context ending: the runner
// let the server go (a stop, a handover, a shutdown), not a caller.
var errServerClosed = errors.New("the server is no longer managed here")

// codeResourceNotFound is MCP's JSON-RPC error for a resource that does not
// exist (resources/read of an unknown uri).
const codeResourceNotFound = -32002

// rpcError maps a failed rpc (an MCP method other than tools/call) as
// callError does, but for the server's own JSON-RPC error: its answer, not
// an outage or a tool's failure, with its code.
func rpcError(ctx context.Context, server, method string, timeout time.Duration, err error) error {
	var wire *jsonrpc.Error
	if ctx.Err() != nil || !errors.As(err, &wire) || wire.Code == jsonrpc.CodeMethodNotFound {
		return callError(ctx, server, method, timeout, err)
	}
	switch wire.Code {
	case jsonrpc.CodeInvalidParams:
		return apierr.Wrap(apierr.Validation, wire.Message, err).WithField("params")
	case codeResourceNotFound:
		return apierr.Wrap(apierr.NotFound, wire.Message, err).WithField("uri")
	}
	return apierr.Wrap(apierr.Internal, fmt.Sprintf("server %s answered %s with an error (%d): %s", server, method, wire.Code, wire.Message), err)
}

// progressTarget is where one call's progress goes: the caller's subject,
// or a task's record (record set).
type progressTarget struct {
	subject, requestID string
	record             func(model.ProgressEvent)
	// sess is the session the call went on: the tokens count up, so a
	// server could name another session's call (another principal's, on a
	// per-principal server) in progress sent on its own.
	sess *mcp.ClientSession
	// policy is the call's secret_scan.results: a message reaches the
	// caller as the result does (a task's record scans its own: cleanProgress).
	policy string
	last   atomic.Int64 // unix nanos of the last forwarded notification
}

// A call's reply waits until every progress notification go-sdk read
// before its response has gone to the handler (caughtUp), at most
// progressSettleMax. Where the connection does not count them, it waits
// until none came for progressQuiet instead, at most progressQuietMax.
const (
	progressSettleMax = 2 * time.Second
	progressQuiet     = 2 * time.Millisecond
	progressQuietMax  = 25 * time.Millisecond
)

// progressCaughtUp reports, for a call whose response go-sdk has read from
// conn, whether this server's handler has seen every progress notification
// read before it; nil when conn does not count them.
func (s *server) progressCaughtUp(sess liveSession) func() bool {
	if sess.raw == nil || sess.ClientSession == nil {
		return nil
	}
	seen := s.progressCounter(sess.ClientSession)
	return func() bool { return seen.Load() >= sess.raw.ProgressRead() }
}

// progressCounter is sess's count of progress notifications handled.
func (s *server) progressCounter(sess *mcp.ClientSession) *atomic.Uint64 {
	v, _ := s.progressSeen.LoadOrStore(sess, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

func (p *progressTarget) settle(caughtUp func() bool) {
	start := time.Now()
	if caughtUp != nil {
		for !caughtUp() && time.Since(start) < progressSettleMax {
			time.Sleep(100 * time.Microsecond)
		}
		return
	}
	for {
		quietSince := start
		if last := time.Unix(0, p.last.Load()); last.After(quietSince) {
			quietSince = last
		}
		wait := progressQuiet - time.Since(quietSince)
		if wait <= 0 || time.Since(start) >= progressQuietMax {
			return
		}
		time.Sleep(wait)
	}
}

// onProgress forwards a progress notification to the caller that asked for it.
func (s *server) onProgress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	// Counted once forwarded (or dropped): settle compares it with the
	// connection's count of those read.
	if req.Session != nil {
		defer s.progressCounter(req.Session).Add(1)
	}
	token, ok := req.Params.ProgressToken.(string)
	if !ok {
		return
	}
	v, ok := s.progress.Load(token)
	if !ok {
		return
	}
	t := v.(*progressTarget)
	if req.Session != t.sess {
		return
	}
	ev := model.ProgressEvent{
		RequestID: t.requestID, Progress: req.Params.Progress, Total: req.Params.Total, Message: req.Params.Message,
	}
	if t.record != nil {
		t.record(ev)
	} else {
		ev.Message = s.r.secrets.checkMessage(t.policy, ev.Message)
		data, _ := json.Marshal(ev)
		msg := &nats.Msg{Subject: t.subject, Data: data, Header: nats.Header{bus.HeaderRequestID: []string{t.requestID}}}
		_ = s.r.nc.PublishMsg(msg)
	}
	t.last.Store(time.Now().UnixNano())
}

// cancelRequest is the body of mcp.v1.cancel.<server>.
type cancelRequest struct {
	RequestID string `json:"request_id"`
}

func (s *server) handleCancel(req micro.Request) {
	var in cancelRequest
	if json.Unmarshal(req.Data(), &in) != nil || in.RequestID == "" {
		return
	}
	c, _, err := s.r.callerOf(req.Subject())
	if err != nil {
		return
	}
	if v, ok := s.inflight.Load(c.inflightKey(in.RequestID)); ok {
		v.(context.CancelFunc)()
		s.log.Debug("call cancelled by caller", "request_id", in.RequestID)
	}
	if req.Reply() != "" {
		_ = req.Respond([]byte(`{}`))
	}
}

// handleRPC serves the other MCP methods on mcp.v1.rpc.<slug>.
func (s *server) handleRPC(req micro.Request) {
	h := nats.Header(req.Headers())
	ctx, span := bus.ProcessSpan(s.ctx, req)
	c, _, err := s.r.admitted(req.Subject())
	var out any
	switch {
	case err != nil:
	case !c.allowsServer(s.slug):
		err = apierr.Newf(apierr.NotFound, "agent %s may call no tool of server %s", c.agent, s.slug)
	case !s.leaseLive():
		err = s.notRun() // as for a call (s.call): the stale copy must not answer
	default:
		out, err = s.rpc(ctx, c, h, req.Data())
	}
	defer bus.EndProcess(span, err)
	if err != nil {
		if errors.Is(err, bus.ErrNotRun) {
			_ = bus.RespondError(req, err, micro.WithHeaders(micro.Headers{bus.HeaderNotRun: []string{"true"}}))
			return
		}
		_ = bus.RespondError(req, err)
		return
	}
	if rerr := req.RespondJSON(out); rerr != nil {
		data, _ := json.Marshal(out)
		_ = bus.RespondError(req, s.r.unsent(rerr, "the answer of server "+s.slug, len(data)))
	}
}

func (s *server) rpc(ctx context.Context, c caller, h nats.Header, data []byte) (any, error) {
	var in model.RPCRequest
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, apierr.Invalid("", "request must be {\"method\":…, \"params\":{…}}")
	}
	if in.Method == "" {
		return nil, apierr.Invalid("method", "method is required")
	}
	if !rpcMethods[in.Method] {
		return nil, apierr.Invalid("method", "unsupported method "+in.Method+
			" (ping, tools/list, resources/list, resources/read, resources/templates/list, resources/subscribe, prompts/list, prompts/get, completion/complete)")
	}
	// An agent granted some tools of the server gets those (tools/list
	// shows them alone); its resources, prompts and completions are no
	// tool's, so they need a grant of all its tools.
	if c.agent != "" && in.Method != "ping" && in.Method != "tools/list" && !c.record.AllowsWholeServer(s.slug) {
		return nil, apierr.Newf(apierr.Unauthorized, "agent %s may use %s of server %s only with a grant of all its tools (%s__*)", c.agent, in.Method, s.slug, s.slug).WithField("method")
	}
	// What the caller sends the server (a prompt's arguments, a resource's
	// URI) is scanned before the server is started or asked.
	if scannedRequests[in.Method] {
		params, found, err := s.r.secrets.checkRequest(s.secretPolicy().ArgumentsPolicy(), in.Method, in.Params)
		for _, f := range found { // the rule and the place, never the value
			s.log.Warn("secret found in a request", "method", in.Method, "where", f.Where, "rule", f.Rule, "action", f.Action, "request_id", h.Get(bus.HeaderRequestID))
		}
		if err != nil {
			return nil, err
		}
		in.Params = params
	}
	// An agent's requests count in its share as its calls do: a flood of
	// slow reads must not take the server from the other callers.
	release, err := s.takeShare(c)
	if err != nil {
		return nil, err
	}
	defer release()
	if in.Method == "resources/subscribe" {
		return s.subscribeRPC(ctx, c, h, in.Params)
	}
	sess, _, cfg, err := s.liveOrStart(ctx, h, "")
	if err != nil {
		return nil, err
	}
	gen := sess.gen
	sess, unuse, err := s.sessionFor(ctx, c, h, sess, cfg)
	if err != nil {
		return nil, err
	}
	defer unuse()
	timeout := cfg.Runtime.CallTimeout.Or(s.r.opts.CallTimeout)
	if ct := bus.CallerTimeout(h); ct > 0 && ct < timeout {
		timeout = ct
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// An rpc names no client subject, but counts as one operation in
	// flight of the session (targetFor), and one given up leaves its
	// principal in doubt as a call does.
	s.clients.enter(sess.ClientSession, nil)
	who, _ := s.r.callerPrincipal(c, h)
	rpcCtx, doubt := ctx, cfg.Runtime.CallTimeout.Or(s.r.opts.CallTimeout)
	defer func() { s.clients.leave(sess.ClientSession, nil, unanswered(rpcCtx, who, doubt)) }()
	target, extra, spanOnly := rpcTarget(in)
	ctx, op := s.startOp(ctx, sess.ClientSession, cfg, in.Method, target, extra...)
	if span := op.Span(); span.IsRecording() {
		span.SetAttributes(spanOnly...)
	}
	var out any
	switch in.Method {
	case "ping":
		err = sess.Ping(ctx, nil)
		out = struct{}{}
	case "tools/list":
		var list *mcp.ListToolsResult
		if list, err = rpcCall(ctx, in.Params, sess.ListTools); err == nil {
			s.mu.RLock()
			// As the catalog: the config's filter, the caller's globs and
			// the pins hide a tool here too.
			list.Tools = slices.DeleteFunc(list.Tools, func(t *mcp.Tool) bool {
				return !cfg.Tools.Allows(t.Name) || !c.allows(s.slug, t) || s.withheldLocked(model.ToolToken(t.Name)) != ""
			})
			s.mu.RUnlock()
			list.Tools = slices.DeleteFunc(list.Tools, func(t *mcp.Tool) bool { return s.unreviewed(cfg, t) })
			for _, t := range list.Tools {
				pinnedFields(t)
			}
		}
		out = list
	case "resources/list":
		out, err = rpcCall(ctx, in.Params, sess.ListResources)
	case "resources/read":
		out, err = rpcCall(ctx, in.Params, sess.ReadResource)
	case "resources/templates/list":
		out, err = rpcCall(ctx, in.Params, sess.ListResourceTemplates)
	case "prompts/list":
		out, err = rpcCall(ctx, in.Params, sess.ListPrompts)
	case "prompts/get":
		out, err = rpcCall(ctx, in.Params, sess.GetPrompt)
	case "completion/complete":
		out, err = rpcCall(ctx, in.Params, sess.Complete)
	}
	if err != nil {
		if _, ok := err.(*apierr.Error); !ok {
			err = s.scrubError(rpcError(ctx, s.slug, in.Method, timeout, err), sess.secrets.redactor())
		}
		if cut := s.restartCutError(ctx, gen, err); cut != nil {
			err = cut
		}
		if in.Method == "prompts/get" {
			// The name is the caller's: one the server has no prompt of
			// would be a series of its own (and /metrics asks no key), so
			// a failed get counts as Other; the span keeps the name.
			op.Relabel(conv.GenAIPromptName.String(telemetry.Other))
		}
		op.End(ctx, errType(err), err)
		return nil, err
	}
	op.End(ctx, "", nil)
	reply, err := rpcReply(out)
	if err != nil {
		return nil, err
	}
	reply, found, err := s.r.secrets.checkReply(cfg, in.Method, reply)
	for _, f := range found { // the rule and the place, never the value
		s.log.Warn("secret found in a reply", "method", in.Method, "where", f.Where, "rule", f.Rule, "action", f.Action, "request_id", h.Get(bus.HeaderRequestID))
	}
	return reply, err
}

// rpcReply encodes an rpc result without the cache hints its server did not
// give: go-sdk encodes ttlMs and cacheScope always, so a server of a protocol
// before 2026-07-28 would show as "ttlMs":0,"cacheScope":"" to the gateway
// and mcpbus rpc. A cacheScope given keeps its ttlMs, 0 included (stale at once).
func rpcReply(out any) (json.RawMessage, error) {
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encoding the result: %w", err)
	}
	if !bytes.Contains(raw, []byte(`"cacheScope":""`)) {
		return raw, nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return raw, nil
	}
	if string(fields["cacheScope"]) != `""` {
		return raw, nil // the empty scope was deeper, not the result's
	}
	delete(fields, "cacheScope")
	if string(fields["ttlMs"]) == "0" {
		delete(fields, "ttlMs")
	}
	return json.Marshal(fields)
}

// rpcMethods are the MCP methods the rpc subject carries.
var rpcMethods = map[string]bool{"ping": true, "tools/list": true, "resources/list": true, "resources/read": true,
	"resources/templates/list": true, "resources/subscribe": true, "prompts/list": true, "prompts/get": true, "completion/complete": true}

// rpcCall decodes params into the method's typed parameters and calls it.
func rpcCall[P any, R any](ctx context.Context, raw json.RawMessage, f func(context.Context, *P) (R, error)) (R, error) {
	p := new(P)
	if len(bytes.TrimSpace(raw)) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		if err := json.Unmarshal(raw, p); err != nil {
			var zero R
			return zero, apierr.Invalid("params", "params do not fit the method: "+err.Error())
		}
	}
	traceParams(ctx, p)
	return f(ctx, p)
}

// controlRequest is the body of the internal control subject.
type controlRequest struct {
	Verb string `json:"verb"`
	// Principal, for forget: whose per-principal session to close.
	Principal string `json:"principal,omitempty"`
	// IfRunning, for restart: only when this replica is running,
	// starting or in error (model.RuntimeRequest.IfRunning).
	IfRunning bool `json:"if_running,omitempty"`
}

// handleControl runs start, stop, restart or status on this owner.
func (s *server) handleControl(req micro.Request) {
	var in controlRequest
	if err := json.Unmarshal(req.Data(), &in); err != nil {
		_ = bus.RespondError(req, apierr.Invalid("verb", "control request must be {\"verb\":…}"))
		return
	}
	ctx, span := bus.ProcessSpan(s.ctx, req)
	waited := time.Now()
	var err error
	switch in.Verb {
	case "start":
		err = s.do(func() error {
			if e := s.backingOff(); e != nil {
				return e
			}
			return s.start(ctx)
		})
		s.lastStart.linkIfWaited(ctx, waited)
	case "stop":
		s.interruptOp(errInterrupted)
		err = s.do(func() error { s.stop(model.StateStopped, false); return nil })
	case "restart":
		// In place, as a config change restarts (calls meanwhile wait, the
		// tools stay listed), with a fresh series of automatic restarts: a
		// server in error whose retries ran out starts again too. The
		// operator's restart asks for a fresh start: one under way (maybe
		// stuck in a handshake that never comes) ends now, as for a stop,
		// rather than holding the restart for its whole start timeout. Not
		// for if_running (a secret changed): that one restarts only what
		// runs or starts, and the start it ended would leave it stopped.
		if !in.IfRunning {
			s.interruptOp(errRestartRequested)
		}
		err = s.do(func() error {
			// Checked in the queue of operations: a start queued before
			// this has come up by now (it may have read the old secrets).
			if st := s.status().State; in.IfRunning && !model.NeedsRestartForSecrets(st) {
				return nil // takes what is stored at its next start
			}
			return s.restartInPlace(ctx, restartManual, true)
		})
	case "pins": // a tool's review was recorded: check the tools again
		err = s.do(func() error { return s.recheckPins(ctx, true) })
	case "forget": // a principal's own credentials changed or were revoked
		s.forgetPrincipal(in.Principal)
	case "status":
	default:
		err = apierr.Invalid("verb", "verb must be start, stop, restart, pins, forget or status")
	}
	defer bus.EndProcess(span, err)
	if err != nil {
		_ = bus.RespondError(req, err)
		return
	}
	_ = req.RespondJSON(s.status())
}

func traceID(span trace.Span) string {
	if sc := span.SpanContext(); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

// secretPolicy is the server's secret_scan policy (the defaults before
// its config is known).
func (s *server) secretPolicy() model.SecretsPolicy {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.cfg == nil {
		return model.SecretsPolicy{}
	}
	return s.cfg.SecretScan
}

// withheldTool tells why the known tool token names is withheld, or "",
// and the tool's name. A tool the config filters out is not named: its
// call is refused as unknown (live).
func (s *server) withheldTool(token string) (why, name string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tools[token]
	if !ok || s.cfg == nil || !s.cfg.Tools.Allows(t.Name) {
		return "", ""
	}
	return s.withheldLocked(token), t.Name
}

// callerMayCall reports whether c may call the tool token names; an unknown
// token passes (the call answers NOT_FOUND as for anyone).
func (s *server) callerMayCall(c caller, token string) bool {
	if c.agent == "" {
		return true
	}
	s.mu.RLock()
	t, ok := s.tools[token]
	s.mu.RUnlock()
	return !ok || c.allows(s.slug, t)
}
