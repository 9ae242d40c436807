package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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
	// ctx carries the caller's principal for the cancel, which runs on
	// its own deadline after the request's context may be gone.
	ctx context.Context
}

// errClientGone ends a completion whose client went away.
var errClientGone = errors.New("the client went away")

// completions answers POST /v1/chat/completions: one turn, followed to its
// end, answered whole or streamed. The request is tracked by its key so a
// revocation or a shutdown ends it.
func (a *API) completions(w http.ResponseWriter, r *http.Request) {
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
		writeError(w, e)
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
	timeout := time.NewTimer(a.opts.TurnTimeout)
	defer timeout.Stop()
	beat := time.NewTicker(a.opts.Heartbeat)
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
			return nil, &Error{Status: http.StatusGatewayTimeout, Type: "server_error", Code: str("timeout"),
				Message: fmt.Sprintf("the turn did not end within %s (the gateway's chat turn timeout); it was cancelled", a.opts.TurnTimeout)}
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
				t.newStep, t.wrote = false, true
				if err := onText(s); err != nil {
					a.cancel(t, "the client went away")
					return nil, errClientGone
				}
			case model.ChatEventToolCall:
				t.newStep = true
			case model.ChatEventUsage:
				if u := ev.Usage; u != nil {
					t.usage.PromptTokens += u.InputTokens
					t.usage.CompletionTokens += u.OutputTokens
				}
			case model.ChatEventError:
				if ev.Error != nil {
					t.lastErr = ev.Error
				}
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
		return "", fromTurn(t.lastErr)
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
