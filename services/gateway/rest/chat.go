package rest

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The conversations of the chat service under /api/v1/chat/conversations (scope
// chat or admin). Each handler is one mcp.v1.chat.* request; a send answers
// 202 as soon as the turn started: its progress is on …/{id}/events.

// ChatMessageRequest is the body of POST /api/v1/chat/conversations/{id}/messages:
// the next user message, with another profile when given.
type ChatMessageRequest struct {
	Message string `json:"message"`
	Profile string `json:"profile,omitempty"`
}

// ChatCancelBody is the optional body of POST …/{id}/cancel: the turn to end
// (any running one when empty).
type ChatCancelBody struct {
	Turn string `json:"turn,omitempty"`
}

// ChatDecisionRequest is the body of POST …/{id}/approvals/{call_id}.
type ChatDecisionRequest struct {
	Decision string `json:"decision"`
}

// conversationRef is the {id} of a conversation URL.
func conversationRef(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !model.ValidConversationID(id) {
		writeError(w, apierr.Invalid("id", "the conversation id in the URL must be a slug or a uuid"))
		return "", false
	}
	return id, true
}

func (a *API) listConversations(w http.ResponseWriter, r *http.Request) {
	list, err := a.client.ChatList(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if list == nil {
		list = []model.ChatConversation{}
	}
	writeJSON(w, http.StatusOK, model.ChatListReply{Conversations: list})
}

// createConversation starts a conversation (or continues the one named) with
// its first message. Without a conversation id the gateway picks a uuid; a
// client that must see every event picks it itself and opens the event
// stream before this request.
func (a *API) createConversation(w http.ResponseWriter, r *http.Request) {
	var in model.ChatSendRequest
	if !decodeBody(w, r, &in) {
		return
	}
	if strings.TrimSpace(in.Profile) == "" {
		writeError(w, apierr.Invalid("profile", "profile is required: the chat profile to talk to"))
		return
	}
	if in.Conversation == "" {
		in.Conversation = uuid.NewString()
	}
	a.send(w, r, in)
}

func (a *API) sendMessage(w http.ResponseWriter, r *http.Request) {
	id, ok := conversationRef(w, r)
	if !ok {
		return
	}
	var in ChatMessageRequest
	if !decodeBody(w, r, &in) {
		return
	}
	a.send(w, r, model.ChatSendRequest{Conversation: id, Profile: in.Profile, Message: in.Message})
}

// send validates here (a 400 without a round trip) and starts the turn.
func (a *API) send(w http.ResponseWriter, r *http.Request, req model.ChatSendRequest) {
	if err := req.Validate(); err != nil {
		writeError(w, err)
		return
	}
	out, err := a.client.ChatSend(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Location", "/api/v1/chat/conversations/"+url.PathEscape(out.Conversation))
	writeJSON(w, http.StatusAccepted, out)
}

func (a *API) conversationHistory(w http.ResponseWriter, r *http.Request) {
	id, ok := conversationRef(w, r)
	if !ok {
		return
	}
	out, err := a.client.ChatHistory(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if out.Entries == nil {
		out.Entries = []model.ChatEntry{}
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) deleteConversation(w http.ResponseWriter, r *http.Request) {
	id, ok := conversationRef(w, r)
	if !ok {
		return
	}
	if err := a.client.ChatDelete(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, model.ChatConversationRef{Conversation: id})
}

func (a *API) cancelTurn(w http.ResponseWriter, r *http.Request) {
	id, ok := conversationRef(w, r)
	if !ok {
		return
	}
	var in ChatCancelBody
	if !decodeBody(w, r, &in) {
		return
	}
	out, err := a.client.ChatCancel(r.Context(), model.ChatCancelRequest{Conversation: id, Turn: in.Turn})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) pendingCalls(w http.ResponseWriter, r *http.Request) {
	id, ok := conversationRef(w, r)
	if !ok {
		return
	}
	out, err := a.client.ChatPending(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if out.Calls == nil {
		out.Calls = []model.ChatToolCall{}
	}
	if out.Inputs == nil {
		out.Inputs = []model.ChatInput{}
	}
	out.Conversation = id
	writeJSON(w, http.StatusOK, out)
}

// ChatAnswerBody is the body of POST …/{id}/inputs/{input_id}: the answer
// to a server's request for input.
type ChatAnswerBody struct {
	Action  string         `json:"action"`
	Content map[string]any `json:"content,omitempty"`
}

func (a *API) answerInput(w http.ResponseWriter, r *http.Request) {
	id, ok := conversationRef(w, r)
	if !ok {
		return
	}
	var in ChatAnswerBody
	if !decodeBody(w, r, &in) {
		return
	}
	req := model.ChatAnswerRequest{Conversation: id, InputID: r.PathValue("input_id"), Action: in.Action, Content: in.Content}
	if err := req.Validate(); err != nil {
		writeError(w, err)
		return
	}
	out, err := a.client.ChatAnswer(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) approveCall(w http.ResponseWriter, r *http.Request) {
	id, ok := conversationRef(w, r)
	if !ok {
		return
	}
	var in ChatDecisionRequest
	if !decodeBody(w, r, &in) {
		return
	}
	req := model.ChatApproveRequest{Conversation: id, CallID: r.PathValue("call_id"), Decision: in.Decision}
	if err := req.Validate(); err != nil {
		writeError(w, err)
		return
	}
	out, err := a.client.ChatApprove(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
