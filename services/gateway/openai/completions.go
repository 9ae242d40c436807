package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// ConversationHeader names, on every completion answer, the conversation the
// request became (its log: GET /api/v1/chat/conversations/{id}).
const ConversationHeader = "X-Mcpbus-Conversation"

// ConversationPrefix starts the id of every conversation made here.
const ConversationPrefix = "oai-"

// Completion is the body of a completion that is not streamed, and (Object
// chat.completion.chunk) of each chunk of one that is.
type Completion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	Usage   *Usage   `json:"usage,omitempty"`
}

// Choice is the one choice of a completion (Message) or of a chunk (Delta).
type Choice struct {
	Index        int            `json:"index"`
	Message      *AnswerMessage `json:"message,omitempty"`
	Delta        *Delta         `json:"delta,omitempty"`
	FinishReason *string        `json:"finish_reason"`
	Logprobs     *struct{}      `json:"logprobs"`
}

// AnswerMessage is the assistant's answer.
type AnswerMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

// Delta is what a chunk adds to the answer.
type Delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// Usage is the turn's token usage, summed over its model steps.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// turn is one running turn of a completion's conversation.
type turn struct {
	conv   string
	id     string
	model  string
	events *events
	usage  Usage
	// lastErr is the turn's last error event: the cause of an error end.
	lastErr *apierr.Error
	// newStep is set by a tool call: the next text is another model step's.
	newStep bool
	wrote   bool
	// ran is set once the turn did something a retry would do again: a
	// model step ended, a tool call began or text came.
	ran bool
	// committed is set once a stream's 200 went out: the status is fixed.
	committed bool
	// ctx carries the caller's principal for the cancel, which runs on
	// its own deadline after the request's context may be gone.
	ctx context.Context
	// limit bounds the turn from arrived, the request's arrival (the
	// client's timeout runs from its sending, not from the turn's start),
	// beat is the interval of a stream's keep-alives (bounds).
	limit, beat time.Duration
	arrived     time.Time
}

// clientMargin is the most the gateway keeps, before a client's own
// timeout, to cancel the turn and answer (answerMargin).
const clientMargin = 5 * time.Second

// answerMargin is what the gateway keeps before a client's timeout of
// client: a fifth of it, but at least a second (a loaded host, a network
// between them) and at most half of it, and never more than clientMargin.
func answerMargin(client time.Duration) time.Duration {
	return min(max(client/5, time.Second), client/2, clientMargin)
}

// bounds are the turn's limit and keep-alive interval for r: the gateway's
// own, shortened to fit the timeout an OpenAI SDK announces (the JavaScript
// and Go SDKs' X-Stainless-Timeout for a request's own timeout, the Python
// SDK's X-Stainless-Read-Timeout, in seconds). The SDKs retry a request they
// timed out, as they never saw its X-Should-Retry: false, which would run
// the turn and its tools again: so a completion is answered (504) before
// that timeout, and a stream sends keep-alives (the first fixes its 200)
// twice within it (the JavaScript SDK's timeout runs until a stream's
// headers, the Python SDK's between two reads).
func (a *API) bounds(r *http.Request, stream bool) (limit, beat time.Duration) {
	limit, beat = a.opts.TurnTimeout, a.opts.Heartbeat
	announced := r.Header.Get("X-Stainless-Timeout")
	if announced == "" {
		announced = r.Header.Get("X-Stainless-Read-Timeout")
	}
	secs, err := strconv.ParseFloat(announced, 64)
	if err != nil || !(secs >= 1 && secs < 1e6) { // under a second (the JavaScript SDK sends 0) or absurd: ignored
		return limit, beat
	}
	client := time.Duration(secs * float64(time.Second))
	if stream {
		return limit, min(beat, client/2)
	}
	return min(limit, client-answerMargin(client)), beat
}

// errClientGone ends a completion whose client went away.
var errClientGone = errors.New("the client went away")

// completions answers POST /v1/chat/completions: one turn, followed to its
// end, answered whole or streamed. The request is tracked by its key so a
// revocation or a shutdown ends it.
func (a *API) completions(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	var req CompletionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, invalid("", "the body is not a chat completion request: "+err.Error()))
		return
	}
	var keyID string
	if p := auth.PrincipalFrom(r.Context()); p != nil {
		keyID = p.KeyID
	}
	ctx, untrack, ok := a.open.add(r.Context(), keyID)
	defer untrack()
	if !ok {
		writeError(w, gatewayEnded(errStopping))
		return
	}
	r = r.WithContext(ctx)
	t, e := a.start(ctx, &req)
	if e != nil {
		writeError(w, e)
		return
	}
	defer t.events.Close()
	w.Header().Set(ConversationHeader, t.conv)
	// The turn runs from here, tools included: an error answered now must
	// not make the OpenAI SDKs send the request again (they retry 408,
	// 409, 429 and 5xx by default, as completions have no side effects),
	// which would run the turn and its tool calls again.
	w.Header().Set("X-Should-Retry", "false")
	t.limit, t.beat = a.bounds(r, req.Stream)
	t.arrived = arrived
	if req.Stream {
		a.streamTurn(w, r, t, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	var text []byte
	done, err := a.follow(r.Context(), t, func(s string) error { text = append(text, s...); return nil }, nil)
	if errors.Is(err, errClientGone) {
		return
	}
	reason, e := finishReason(t, done, err)
	if e != nil {
		a.writeTurnError(w, t, e)
		return
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTimeout))
	writeJSON(w, http.StatusOK, Completion{ID: "chatcmpl-" + t.conv, Object: "chat.completion", Created: time.Now().Unix(),
		Model: t.model, Usage: t.totalUsage(),
		Choices: []Choice{{Message: &AnswerMessage{Role: model.ChatRoleAssistant, Content: string(text)}, FinishReason: &reason}}})
}

// start checks the request and the profile, follows a new conversation's
// events and only then sends the message, so no event is missed.
func (a *API) start(ctx context.Context, req *CompletionRequest) (*turn, *Error) {
	send, e := req.parse()
	if e != nil {
		return nil, e
	}
	if !model.ValidSlug(req.Model) {
		return nil, modelNotFound(req.Model)
	}
	if _, err := a.chat.GetProfile(ctx, req.Model); err != nil {
		if apierr.Of(err) == apierr.NotFound {
			return nil, modelNotFound(req.Model)
		}
		return nil, fromBus(err)
	}
	send.Conversation = ConversationPrefix + uuid.NewString()
	// Nobody here can answer a server's questions: the chat declines them.
	send.NoInput = true
	if err := send.Validate(); err != nil {
		e := fromBus(err)
		if e.Param != nil {
			e.Param = str(requestParam(*e.Param, len(req.Messages)-1))
		}
		return nil, e
	}
	evs, err := a.subscribe(send.Conversation)
	if err != nil {
		return nil, fromBus(err)
	}
	// Not cut short by the client: a turn that started must be known to be
	// cancelled when the client is already gone (follow does it).
	reply, err := a.chat.ChatSend(context.WithoutCancel(ctx), send)
	if err != nil {
		evs.Close()
		if e := apierr.From(err); e.Code == apierr.NotFound && e.Field == "profile" {
			return nil, modelNotFound(req.Model) // deleted since the check
		}
		return nil, fromBus(err)
	}
	return &turn{conv: reply.Conversation, id: reply.Turn, model: req.Model, events: evs, ctx: context.WithoutCancel(ctx)}, nil
}

// follow relays the turn's text to onText until it is done, and calls onBeat
// (when set) every Heartbeat. The turn is cancelled when the client goes, a
// callback fails, events were lost or TurnTimeout passes.
func (a *API) follow(ctx context.Context, t *turn, onText func(string) error, onBeat func() error) (*model.ChatDone, error) {
	// What checking the request and starting the turn took (a loaded host,
	// a slow bus) counts: the 504 must still come before the client's timeout.
	timeout := time.NewTimer(t.limit - time.Since(t.arrived))
	defer timeout.Stop()
	beat := time.NewTicker(t.beat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); errors.Is(cause, errRevoked) || errors.Is(cause, errStopping) {
				a.cancel(t, cause.Error())
				return nil, gatewayEnded(cause)
			}
			a.cancel(t, "the client went away")
			return nil, errClientGone
		case <-timeout.C:
			a.cancel(t, "turn timeout")
			why := "the gateway's chat turn timeout"
			if t.limit < a.opts.TurnTimeout {
				why = "just under the client's timeout, X-Stainless-Timeout"
			}
			return nil, &Error{Status: http.StatusGatewayTimeout, Type: "server_error", Code: str("timeout"),
				Message: fmt.Sprintf("the turn did not end within %s (%s); it was cancelled", t.limit, why)}
		case <-t.events.Lost:
			a.cancel(t, "events lost")
			return nil, &Error{Status: http.StatusInternalServerError, Type: "server_error",
				Message: "the gateway fell behind the turn's events; the turn was cancelled"}
		case <-beat.C:
			if onBeat != nil {
				if err := onBeat(); err != nil {
					a.cancel(t, "the client went away")
					return nil, errClientGone
				}
			}
		case ev := <-t.events.C:
			if ev.Turn != t.id {
				continue
			}
			switch ev.Kind {
			case model.ChatEventTextDelta:
				s := ev.Text
				if s == "" {
					continue
				}
				if t.newStep && t.wrote {
					s = "\n\n" + s // another model step's text
				}
				t.newStep, t.wrote, t.ran = false, true, true
				if err := onText(s); err != nil {
					a.cancel(t, "the client went away")
					return nil, errClientGone
				}
			case model.ChatEventToolCall:
				t.newStep, t.ran = true, true
			case model.ChatEventUsage:
				t.ran = true
				if u := ev.Usage; u != nil {
					t.usage.PromptTokens += u.InputTokens
					t.usage.CompletionTokens += u.OutputTokens
				}
			case model.ChatEventError:
				if ev.Error == nil {
					continue
				}
				if ev.RetryAfter > 0 && !t.ran && !t.committed {
					// The provider rate-limited the first step: nothing
					// ran, so the client's own retry (the SDKs honour
					// Retry-After) is safe, and it hears at once rather
					// than after minutes of the chat's retries.
					return nil, &Error{Status: http.StatusTooManyRequests, Type: errorType(http.StatusTooManyRequests),
						Code: str("rate_limit_exceeded"), RetryAfter: ev.RetryAfter, Retry: true,
						Message: "the chat profile's model provider is rate limiting it: " + ev.Error.Message + " (the turn was dropped before it ran anything)"}
				}
				t.lastErr = ev.Error
			case model.ChatEventDone:
				if ev.Done == nil {
					return &model.ChatDone{Reason: model.TurnFinal}, nil
				}
				return ev.Done, nil
			}
		}
	}
}

// gatewayEnded is the error of a completion the gateway ended: its key was
// revoked (401) or it is stopping (503).
func gatewayEnded(cause error) *Error {
	if errors.Is(cause, errRevoked) {
		return &Error{Status: http.StatusUnauthorized, Type: "authentication_error", Code: str("key_revoked"),
			Message: "the API key was revoked; the turn was cancelled"}
	}
	return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: str("shutting_down"),
		Message: "the gateway is stopping; the turn was cancelled"}
}

// cancel ends the turn at the chat service (on its own deadline: the
// request's context may be gone).
func (a *API) cancel(t *turn, why string) {
	base := t.ctx
	if base == nil {
		base = context.Background()
	}
	ctx, stop := context.WithTimeout(base, requestTimeout)
	defer stop()
	if _, err := a.chat.ChatCancel(ctx, model.ChatCancelRequest{Conversation: t.conv, Turn: t.id}); err != nil {
		a.log.Warn("cancelling a chat completion's turn failed", "conversation", t.conv, "why", why, "error", err)
	}
}

// writeTurnError answers the error e of turn t: one the client may retry
// (it ran nothing) discards the turn first.
func (a *API) writeTurnError(w http.ResponseWriter, t *turn, e *Error) {
	if e.Retry {
		a.discard(t)
	}
	writeError(w, e)
}

// discard deletes the conversation of a turn that ran nothing (which ends
// the turn), so a client's retry leaves no dead conversation behind; should
// that fail, it cancels the turn.
func (a *API) discard(t *turn) {
	ctx, stop := context.WithTimeout(t.ctx, requestTimeout)
	defer stop()
	if err := a.chat.ChatDelete(ctx, t.conv); err != nil {
		a.log.Warn("deleting a chat completion's conversation failed", "conversation", t.conv, "error", err)
		a.cancel(t, "dropped")
	}
}

// finishReason maps how the turn ended to OpenAI's finish_reason, or to the
// error to answer.
func finishReason(t *turn, done *model.ChatDone, err error) (string, *Error) {
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return "", e
		}
		return "", fromTurn(err)
	}
	switch done.Reason {
	case model.TurnFinal:
		// The answer's last step may itself be cut short by the provider.
		switch done.StopReason {
		case model.ChatStopMaxTokens:
			return "length", nil
		case model.ChatStopRefusal:
			return "content_filter", nil
		}
		return "stop", nil
	case model.TurnMaxSteps, model.TurnBudget, model.TurnRepeated:
		// A bound of the loop cut the turn: the answer is not the model's last word.
		return "length", nil
	case model.TurnCancelled:
		return "", &Error{Status: http.StatusConflict, Type: "invalid_request_error", Code: str("turn_cancelled"),
			Message: "the turn was cancelled (mcp.v1.chat.cancel) before it ended"}
	}
	if t.lastErr != nil {
		e := fromTurn(t.lastErr)
		// A provider failing a first step that may pass on another try
		// (unavailable, unreachable, rate limited): the client's own retry
		// of 5xx and 429 is safe, as nothing ran.
		if !t.ran && !e.NoRetry && (e.Status == http.StatusServiceUnavailable || e.Status == http.StatusGatewayTimeout || e.Status == http.StatusTooManyRequests) {
			e.Retry = true
		}
		return "", e
	}
	msg := done.Message
	if msg == "" {
		msg = "the turn ended with an error (" + done.Reason + ")"
	}
	return "", &Error{Status: http.StatusInternalServerError, Type: "server_error", Message: msg}
}

// totalUsage is the usage of the turn.
func (t *turn) totalUsage() *Usage {
	u := t.usage
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return &u
}

// Error makes *Error an error (follow returns it).
func (e *Error) Error() string { return e.Message }
