//lint:file-ignore SA1019 sampling is deprecated by protocol 2026-07-28 (SEP-2577) but works for at least twelve months, and servers of older protocols use it: mcpbus relays it.

package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Server-to-client requests for clients of protocol 2026-07-28 (multi
// round-trip, SEP-2322). Such a client has no stream the gateway could send
// a request on: a server that needs its input answers the tools/call with
// resultType "input_required", the requests in inputRequests and an opaque
// requestState, and the client retries the call with inputResponses and the
// requestState. The runner relays what the upstream server asks as a NATS
// request to the caller's inbox (libs/client CallOptions.OnClientRequest),
// and waits for the reply inside the bus call. So the gateway keeps the bus
// call running across the client's rounds ("held", under a random id named
// by the sealed requestState, mrtrstate.go): a relayed request answers the
// HTTP request of the round as an input request, the retry's inputResponses
// answer the relayed requests, and the retry then waits for the final result
// or the next relayed request. A held call ends with its result, its
// timeout (the call's own), a refused retry, or the gateway's Close; it
// lives in the gateway instance that made it.

// heldCall is one bus call kept running across a client's rounds.
type heldCall struct {
	id, owner, tool string
	expires         time.Time
	caps            *mcp.ClientCapabilities // of the first request
	ctx             context.Context         // the bus call's; ends it when done
	cancel          context.CancelFunc
	asks            chan *inputAsk   // relayed requests not yet put to the client
	done            chan callOutcome // the bus call's outcome (buffered: one)

	mu          sync.Mutex
	round       int                  // rounds answered input_required so far
	outstanding map[string]*inputAsk // put to the client in the last round, by input id
	busy        bool                 // a request of the client is waiting on the call
	seq         int                  // last input id
	notify      func(model.ProgressEvent)
}

// inputAsk is one relayed request waiting for the client's answer.
type inputAsk struct {
	id     string
	method string
	input  mcp.InputRequest
	answer chan mcp.InputResponse // buffered: one
}

type callOutcome struct {
	raw json.RawMessage
	err error
}

// run makes the bus call; its outcome waits on done for the client's round.
// progress says the client asked for progress (a retry repeats the first
// request's _meta, its progress token with it).
func (hc *heldCall) run(c *client.Client, server, tool string, args json.RawMessage, progress bool) {
	opts := &client.CallOptions{OnClientRequest: hc.relay}
	if progress {
		opts.OnProgress = hc.progress
	}
	raw, err := c.Call(hc.ctx, server, tool, args, opts)
	hc.done <- callOutcome{raw: raw, err: err}
}

// relay is the call's answerer of the server's requests: it puts the request
// to the client's next round and waits for the answer of its retry.
func (hc *heldCall) relay(ctx context.Context, req model.ClientRequest) (any, error) {
	in, err := inputRequest(hc.caps, req)
	if err != nil {
		return nil, err
	}
	hc.mu.Lock()
	hc.seq++
	ask := &inputAsk{id: fmt.Sprintf("mcpbus-%d", hc.seq), method: req.Method, input: in, answer: make(chan mcp.InputResponse, 1)}
	hc.mu.Unlock()
	select {
	case hc.asks <- ask:
	case <-ctx.Done():
		return nil, apierr.Newf(apierr.Network, "the call ended before %s reached the MCP client", req.Method)
	}
	select {
	case r := <-ask.answer:
		return r, nil
	case <-ctx.Done():
		return nil, apierr.Newf(apierr.Network, "the MCP client did not answer %s before the call ended", req.Method)
	}
}

// progress passes the call's progress to the client's request of the
// moment, if it asked for progress; between rounds it is dropped.
func (hc *heldCall) progress(ev model.ProgressEvent) {
	hc.mu.Lock()
	notify := hc.notify
	hc.mu.Unlock()
	if notify != nil {
		notify(ev)
	}
}

// attend marks the call as waited on (refusing a second waiter) and routes
// its progress to req, if given; the returned func undoes both.
func (hc *heldCall) attend(ctx context.Context, req *mcp.CallToolRequest) (leave func(), ok bool) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.busy {
		return nil, false
	}
	hc.busy = true
	hc.notify = nil
	// A retry passed on by another instance (no req) gets no progress.
	if token := progressToken(req); token != nil {
		hc.notify = func(ev model.ProgressEvent) {
			// The request's context routes the notification to its stream.
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: ev.Progress, Total: ev.Total, Message: ev.Message,
			})
		}
	}
	return func() {
		hc.mu.Lock()
		hc.busy, hc.notify = false, nil
		hc.mu.Unlock()
	}, true
}

// progressToken is the progress token of req, nil when none (or no req).
func progressToken(req *mcp.CallToolRequest) any {
	if req == nil {
		return nil
	}
	return req.Params.GetProgressToken()
}

// heldCalls are the calls this gateway instance holds, by id.
type heldCalls struct {
	mu    sync.Mutex
	calls map[string]*heldCall
}

func (h *heldCalls) add(hc *heldCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls == nil {
		h.calls = map[string]*heldCall{}
	}
	h.calls[hc.id] = hc
}

func (h *heldCalls) remove(id string) {
	h.mu.Lock()
	delete(h.calls, id)
	h.mu.Unlock()
}

func (h *heldCalls) get(id string) *heldCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[id]
}

func (h *heldCalls) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls)
}

// cancel ends the held calls for which drop is true (each removes itself).
func (h *heldCalls) cancel(drop func(*heldCall) bool) {
	h.mu.Lock()
	var gone []*heldCall
	for _, hc := range h.calls {
		if drop(hc) {
			gone = append(gone, hc)
		}
	}
	h.mu.Unlock()
	for _, hc := range gone {
		hc.cancel()
	}
}

// HeldCalls is the number of bus calls held for clients' next rounds: a
// stopping gateway waits for them (within its shutdown timeout).
func (a *Aggregator) HeldCalls() int { return a.held.len() }

// modernAsks reports whether a tools/call of a 2026-07-28 client must go
// through a held call: the client declared elicitation or sampling in the
// request's _meta (go-sdk puts them in its InitializeParams).
func modernAsks(req *mcp.CallToolRequest) bool {
	return modernEra(req) && asksClient(req.Session)
}

// retrying reports whether req is a multi round-trip retry.
func retrying(req *mcp.CallToolRequest) bool {
	return req.Params.RequestState != "" || req.Params.InputResponses != nil
}

// holdCall starts the bus call of a tools/call of a client that can answer
// the server's requests, and answers its first round.
func (a *Aggregator) holdCall(ctx context.Context, v *view, e *toolEntry, req *mcp.CallToolRequest, args json.RawMessage) (*mcp.CallToolResult, error) {
	// The call outlives this HTTP request (not its values: trace context),
	// bounded by the call's own timeout.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.opts.CallTimeout)
	expires, _ := hctx.Deadline()
	hc := &heldCall{
		id: rand.Text(), owner: v.key, tool: e.name, expires: expires,
		caps: req.Session.InitializeParams().Capabilities, ctx: hctx, cancel: cancel,
		asks: make(chan *inputAsk, 16), done: make(chan callOutcome, 1),
	}
	a.held.add(hc)
	context.AfterFunc(hctx, func() { a.held.remove(hc.id) })
	leave, _ := hc.attend(ctx, req)
	defer leave()
	go hc.run(a.client, e.cat.Server, e.cat.Tool, args, req.Params.GetProgressToken() != nil)
	return a.nextRound(ctx, hc, e)
}

// nextRound waits for what ends the client's round: the call's result, or
// the server's next requests (answered as input_required). A client that
// goes away mid-round ends the call.
func (a *Aggregator) nextRound(ctx context.Context, hc *heldCall, e *toolEntry) (*mcp.CallToolResult, error) {
	select {
	case out := <-hc.done:
		return a.finish(hc, e, out)
	default:
	}
	select {
	case out := <-hc.done:
		return a.finish(hc, e, out)
	case ask := <-hc.asks:
		asks := []*inputAsk{ask}
		for more := true; more; { // the server's requests of the moment, in one round
			select {
			case ask := <-hc.asks:
				asks = append(asks, ask)
			default:
				more = false
			}
		}
		return a.inputRequired(hc, asks)
	case <-ctx.Done():
		hc.cancel()
		return nil, ctx.Err()
	}
}

// finish ends a held call with the bus call's outcome.
func (a *Aggregator) finish(hc *heldCall, e *toolEntry, out callOutcome) (*mcp.CallToolResult, error) {
	defer hc.cancel()
	if res := a.unservedResult(e, out.err); res != nil {
		return res, nil
	}
	if res, perr, ok := a.authorizationPrompt(hc.ctx, hc.caps, nil, e, out.err); ok {
		return res, perr
	}
	if out.err != nil {
		return nil, a.callError(hc.ctx, e, out.err)
	}
	return a.callResult(e, out.raw)
}

// inputRequired answers a round with the server's requests and the sealed
// state naming the held call and this round.
func (a *Aggregator) inputRequired(hc *heldCall, asks []*inputAsk) (*mcp.CallToolResult, error) {
	requests := mcp.InputRequestMap{}
	hc.mu.Lock()
	hc.round++
	hc.outstanding = map[string]*inputAsk{}
	for _, ask := range asks {
		hc.outstanding[ask.id] = ask
		requests[ask.id] = ask.input
	}
	st := roundState{Call: hc.id, Owner: hc.owner, Tool: hc.tool, Round: hc.round, Expires: hc.expires.UnixMilli()}
	hc.mu.Unlock()
	state, err := a.sealer.seal(st)
	if err != nil {
		hc.cancel()
		return nil, rpcError(jsonrpc.CodeInternalError, apierr.Wrap(apierr.Internal, "sealing the requestState", err))
	}
	// go-sdk marks it resultType "input_required" for a client of 2026-07-28.
	return &mcp.CallToolResult{InputRequests: requests, RequestState: state}, nil
}

// resumeCall takes a retry of a held call: one of another instance is
// passed to it over the bus (mrtrforward.go), one of this instance resumed.
func (a *Aggregator) resumeCall(ctx context.Context, v *view, e *toolEntry, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	p := req.Params
	if p.RequestState == "" {
		return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("requestState", "inputResponses without requestState: a retry must echo the requestState of the input_required result"))
	}
	if holder, ok := a.sealer.otherInstance(p.RequestState); ok {
		return a.forwardRetry(ctx, holder, v.key, e, p)
	}
	return a.resumeHeld(ctx, v.key, e, p.RequestState, p.InputResponses, req)
}

// resumeHeld resumes a held call of this instance for owner (a view key):
// the state must be unexpired, the owner's, for tool e and the last round,
// and responses must answer every request of that round. Any of that wrong
// is -32602 and ends the held call (when it names one), except a state of
// another caller, which must not be able to end someone else's call, nor
// learn whether it is still held or has expired. req, when the retry came
// straight from its client, takes the call's progress.
func (a *Aggregator) resumeHeld(ctx context.Context, owner string, e *toolEntry, state string, responses mcp.InputResponseMap, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	refuse := func(hc *heldCall, err *apierr.Error) (*mcp.CallToolResult, error) {
		if hc != nil {
			hc.cancel()
		}
		return nil, rpcError(jsonrpc.CodeInvalidParams, err)
	}
	st, bad := a.sealer.open(state, time.Now())
	if bad != nil && st.Call == "" { // did not open: names no call, nor its owner
		return refuse(nil, bad)
	}
	if st.Owner != owner {
		// Not the caller's to end, nor to know of: a replayed state leaves
		// the round trip to the one it belongs to, and gets the same answer
		// whether that call is still held, over or expired.
		return refuse(nil, apierr.Invalid("requestState", "requestState belongs to another caller"))
	}
	hc := a.held.get(st.Call)
	if bad != nil {
		return refuse(hc, bad)
	}
	if hc == nil {
		return refuse(nil, apierr.Invalid("requestState", "the call this requestState names is over (it finished, timed out or was refused): call the tool again without it"))
	}
	if st.Tool != e.name {
		return refuse(hc, apierr.Invalid("requestState", fmt.Sprintf("requestState is of a call of %s, not %s", st.Tool, e.name)))
	}
	leave, ok := hc.attend(ctx, req)
	if !ok {
		return refuse(hc, apierr.Invalid("requestState", "another request is already retrying this call"))
	}
	defer leave()
	hc.mu.Lock()
	if st.Round != hc.round {
		hc.mu.Unlock()
		return refuse(hc, apierr.Invalid("requestState", "requestState is of an earlier round, already answered"))
	}
	if bad := checkResponses(hc.outstanding, responses); bad != nil {
		hc.mu.Unlock()
		return refuse(hc, bad)
	}
	for id, ask := range hc.outstanding {
		ask.answer <- responses[id] // buffered: never blocks
	}
	hc.outstanding = nil
	hc.mu.Unlock()
	return a.nextRound(ctx, hc, e)
}

// checkResponses says what is wrong with the answers to a round, if anything.
func checkResponses(asked map[string]*inputAsk, got mcp.InputResponseMap) *apierr.Error {
	var missing []string
	for id, ask := range asked {
		r, ok := got[id]
		switch {
		case !ok || r == nil:
			missing = append(missing, id)
		case !answersMethod(ask.method, r):
			return apierr.Invalid("inputResponses", fmt.Sprintf("inputResponses[%q] is not a result of %s", id, ask.method))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return apierr.Invalid("inputResponses", "inputResponses has no answer to "+strings.Join(missing, ", ")+": every input request of the round must be answered")
	}
	for id := range got {
		if asked[id] == nil {
			known := slices.Sorted(maps.Keys(asked))
			return apierr.Invalid("inputResponses", fmt.Sprintf("inputResponses[%q] answers no input request of the round (asked: %s)", id, strings.Join(known, ", ")))
		}
	}
	return nil
}
