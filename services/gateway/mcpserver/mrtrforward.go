package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/telemetry"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
)

// A held call lives in the gateway instance that made it, and nothing makes
// a client's retry reach that instance again (no sticky routing is
// required). A retry whose requestState another instance sealed is passed
// to it over the bus, on gateway.retry.<instance> (only gateways may
// publish or subscribe there, libs/access), with the caller's view key as
// the instance that authenticated the caller knows it: the holder checks
// it, the state and the answers as for a retry of its own, and its answer
// (the result, the next round, or the JSON-RPC error) goes back to the
// client unchanged. The progress of a passed-on round is not relayed.

// forwardedRetry is a retry passed to the instance holding its call.
type forwardedRetry struct {
	Owner          string          `json:"owner"` // view key of the caller
	Tool           string          `json:"tool"`  // exposed tool name
	RequestState   string          `json:"requestState"`
	InputResponses json.RawMessage `json:"inputResponses,omitempty"`
}

// forwardedAnswer is the holder's answer: a CallToolResult or an error.
type forwardedAnswer struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *jsonrpc.Error  `json:"error,omitempty"`
}

// forwardRetry passes a retry to the instance holding its call and returns
// its answer.
func (a *Aggregator) forwardRetry(ctx context.Context, holder, owner string, e *toolEntry, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	fail := func(err *apierr.Error) (*mcp.CallToolResult, error) {
		return nil, rpcError(jsonrpc.CodeInternalError, err)
	}
	fr := forwardedRetry{Owner: owner, Tool: e.name, RequestState: p.RequestState}
	if p.InputResponses != nil {
		var err error
		if fr.InputResponses, err = json.Marshal(p.InputResponses); err != nil {
			return fail(apierr.Wrap(apierr.Internal, "encoding inputResponses", err))
		}
	}
	data, err := json.Marshal(fr)
	if err != nil {
		return fail(apierr.Wrap(apierr.Internal, "encoding the retry", err))
	}
	msg := nats.NewMsg(bus.NewSubjects(a.opts.Prefix).GatewayRetry(holder))
	msg.Data = data
	// The holder answers within the call's time, which never exceeds CallTimeout.
	ctx, cancel := context.WithTimeout(ctx, a.opts.CallTimeout+5*time.Second)
	defer cancel()
	reply, err := a.requestHolder(ctx, msg)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("requestState",
				fmt.Sprintf("the gateway instance holding this call (%s) is gone (stopped or restarted): call the tool again without requestState", holder)))
		}
		return fail(apierr.From(err))
	}
	var ans forwardedAnswer
	if err := json.Unmarshal(reply.Data, &ans); err != nil {
		return fail(apierr.Wrap(apierr.Internal, "the holding gateway's answer: "+err.Error(), err))
	}
	if ans.Error != nil {
		return nil, ans.Error
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(ans.Result, &res); err != nil {
		return fail(apierr.Wrap(apierr.Internal, "the holding gateway's result: "+err.Error(), err))
	}
	return &res, nil
}

// holderProbe is how often a passed-on retry checks that its holder is
// still there: one killed while the round waits (for its server's next
// request or its result) never answers, and the client would wait until the
// call's timeout for nothing.
const holderProbe = 2 * time.Second

// retryProbeHeader marks a probe of the holder: answered at once, empty.
const retryProbeHeader = "Mcpbus-Retry-Probe"

// requestHolder sends a retry to its holder and waits for the answer,
// failing with nats.ErrNoResponders as soon as the holder is found gone.
func (a *Aggregator) requestHolder(ctx context.Context, msg *nats.Msg) (*nats.Msg, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	gone := make(chan struct{})
	go func() {
		t := time.NewTicker(holderProbe)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			probe := nats.NewMsg(msg.Subject)
			probe.Header.Set(retryProbeHeader, "1")
			pctx, pcancel := context.WithTimeout(ctx, holderProbe)
			_, err := a.nc.RequestMsgWithContext(pctx, probe)
			pcancel()
			if errors.Is(err, nats.ErrNoResponders) {
				close(gone)
				cancel()
				return
			}
		}
	}()
	reply, err := bus.Request(ctx, a.nc, msg, 0)
	if err != nil {
		select {
		case <-gone:
			return nil, nats.ErrNoResponders
		default:
		}
	}
	return reply, err
}

// serveRetries takes the retries other instances pass on for the calls this
// one holds, until ctx ends.
func (a *Aggregator) serveRetries(ctx context.Context) (*nats.Subscription, error) {
	subject := bus.NewSubjects(a.opts.Prefix).GatewayRetry(a.sealer.instance)
	sub, err := a.nc.Subscribe(subject, func(m *nats.Msg) {
		if !bus.InboxMsg(a.log, m) {
			return
		}
		if m.Header.Get(retryProbeHeader) != "" {
			_ = m.Respond(nil) // here: the retry it asks about is still being served
			return
		}
		go a.serveRetry(ctx, m) // a round may wait for the person answering
	})
	if err != nil {
		return nil, fmt.Errorf("mcpserver: subscribing %s: %w", subject, err)
	}
	return sub, nil
}

func (a *Aggregator) serveRetry(ctx context.Context, m *nats.Msg) {
	// The retry continues the trace of the request passed on: without it
	// the sending instance's span had no consumer, and the held call's
	// round went unseen under the retry that answered it.
	ctx, span := bus.ProcessMsgSpan(ctx, m)
	var failed error
	defer func() {
		if failed != nil && span.IsRecording() {
			span.SetAttributes(conv.ErrorType.String(errorType(failed)))
			span.SetStatus(codes.Error, telemetry.StatusText(failed.Error()))
		}
		span.End()
	}()
	answer := func(res *mcp.CallToolResult, err error) {
		failed = err
		var ans forwardedAnswer
		if err == nil {
			ans.Result, err = json.Marshal(res)
		}
		if err != nil {
			if ans.Error, _ = err.(*jsonrpc.Error); ans.Error == nil {
				ans.Error = rpcError(jsonrpc.CodeInternalError, apierr.From(err))
			}
		}
		data, merr := json.Marshal(ans)
		if merr != nil {
			_ = m.RespondMsg(bus.ErrorMsg(apierr.Wrap(apierr.Internal, "encoding the answer", merr)))
			return
		}
		if err := m.Respond(data); err != nil {
			// Too large for the bus once wrapped (a result near max_payload):
			// say so rather than leave the asking instance to time out.
			_ = m.RespondMsg(bus.ErrorMsg(apierr.Wrap(apierr.Internal, "the held call's answer could not be passed back over the bus: "+err.Error(), err)))
		}
	}
	var fr forwardedRetry
	if err := json.Unmarshal(m.Data, &fr); err != nil || fr.Owner == "" {
		answer(nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("requestState", "not a forwarded retry")))
		return
	}
	var responses mcp.InputResponseMap
	if len(fr.InputResponses) > 0 && string(fr.InputResponses) != "null" {
		if err := json.Unmarshal(fr.InputResponses, &responses); err != nil {
			answer(nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Invalid("inputResponses", err.Error())))
			return
		}
	}
	a.mu.Lock()
	e := a.tools[fr.Tool]
	a.mu.Unlock()
	if e == nil {
		answer(nil, rpcError(jsonrpc.CodeInvalidParams, apierr.Newf(apierr.NotFound, "unknown tool %q", fr.Tool).WithField("name")))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, a.opts.CallTimeout)
	defer cancel()
	answer(a.resumeHeld(ctx, fr.Owner, e, fr.RequestState, responses, nil))
}
