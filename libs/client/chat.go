package client

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The chat service's endpoints (mcp.v1.chat.*, mcp.v1.chat.profiles.*) and
// its events (mcp.v1.events.chat.<conversation>).

// ErrChatNotRunning is the message of a chat request nobody answered.
const ErrChatNotRunning = "the chat service is not running (start it with `mcpbus up`, or run services/chat)"

func (c *Client) chat(ctx context.Context, verb string, in, out any) error {
	err := bus.RequestJSON(ctx, c.nc, c.subj.Service("chat", verb), in, out, c.timeout)
	if errors.Is(err, nats.ErrNoResponders) {
		return apierr.Wrap(apierr.ServiceUnavailable, ErrChatNotRunning, err)
	}
	return err
}

// ChatSend sends one user message; the turn runs on, its events follow on
// reply.Events. Subscribe (FollowChat) before sending so none is missed: a
// new conversation may be given its id (a uuid) for that.
func (c *Client) ChatSend(ctx context.Context, req model.ChatSendRequest) (model.ChatSendReply, error) {
	var out model.ChatSendReply
	err := c.chat(ctx, "send", req, &out)
	return out, err
}

// ChatHistory returns the log of a conversation, in order.
func (c *Client) ChatHistory(ctx context.Context, conversation string) (model.ChatHistoryReply, error) {
	var out model.ChatHistoryReply
	err := c.chat(ctx, "history", model.ChatHistoryRequest{Conversation: conversation}, &out)
	return out, err
}

// ChatWatch asks whether the caller may follow a conversation's events
// (NOT_FOUND: another's, or one nobody has yet: a watch claims nothing). The
// caller's events are those after the sequence it returns.
func (c *Client) ChatWatch(ctx context.Context, conversation string) (uint64, error) {
	var out model.ChatWatchReply
	err := c.chat(ctx, "watch", model.ChatWatchRequest{Conversation: conversation}, &out)
	return out.After, err
}

// ChatList lists the conversations, most recent first.
func (c *Client) ChatList(ctx context.Context) ([]model.ChatConversation, error) {
	var out model.ChatListReply
	err := c.chat(ctx, "list", model.ChatListRequest{}, &out)
	return out.Conversations, err
}

// ChatDelete deletes a conversation's log.
func (c *Client) ChatDelete(ctx context.Context, conversation string) error {
	return c.chat(ctx, "delete", model.ChatDeleteRequest{Conversation: conversation}, nil)
}

// ChatCancel ends the running turn of a conversation.
func (c *Client) ChatCancel(ctx context.Context, req model.ChatCancelRequest) (model.ChatCancelReply, error) {
	var out model.ChatCancelReply
	err := c.chat(ctx, "cancel", req, &out)
	return out, err
}

// ChatApprove answers a tool call awaiting approval.
func (c *Client) ChatApprove(ctx context.Context, req model.ChatApproveRequest) (model.ChatApproveReply, error) {
	var out model.ChatApproveReply
	err := c.chat(ctx, "approve", req, &out)
	return out, err
}

// ChatPending lists what waits for the user in a conversation: the tool
// calls awaiting approval and the servers' requests for input.
func (c *Client) ChatPending(ctx context.Context, conversation string) (model.ChatPendingReply, error) {
	var out model.ChatPendingReply
	err := c.chat(ctx, "pending", model.ChatPendingRequest{Conversation: conversation}, &out)
	return out, err
}

// ChatAnswer answers a server's request for input (an input_requested event).
func (c *Client) ChatAnswer(ctx context.Context, req model.ChatAnswerRequest) (model.ChatAnswerReply, error) {
	var out model.ChatAnswerReply
	err := c.chat(ctx, "answer", req, &out)
	return out, err
}

// ProfileKey says what a profile write does with the API key.
type ProfileKey struct {
	// Set, when not "", is the new key: sealed to the credential service on
	// the way, never in clear on the bus.
	Set string
	// Remove deletes the stored key.
	Remove bool
}

// PutProfile creates or replaces a profile (a non-zero Revision must be the
// current one) and sets or removes its API key; no key keeps the stored one.
func (c *Client) PutProfile(ctx context.Context, p model.Profile, key ProfileKey) (model.Profile, error) {
	if key.Set != "" && key.Remove {
		return model.Profile{}, apierr.Invalid("api_key", "set the API key or remove it, not both")
	}
	var out model.Profile
	err := c.sealing(func() error {
		req := model.ChatProfilePutRequest{Profile: p, RemoveAPIKey: key.Remove}
		if key.Set != "" {
			sealed, err := c.sealer().SealSecrets(ctx, model.Credentials{Env: map[string]string{model.ChatAPIKeyEnv: key.Set}})
			if err != nil {
				return err
			}
			req.SealedSecrets = sealed
		}
		return c.chat(ctx, "profiles.put", req, &out)
	})
	return out, err
}

// GetProfile returns one profile (never its key: HasAPIKey says if it has one).
func (c *Client) GetProfile(ctx context.Context, name string) (model.Profile, error) {
	var out model.Profile
	err := c.chat(ctx, "profiles.get", model.ChatProfileRef{Name: name}, &out)
	return out, err
}

// ListProfiles returns every profile, by name.
func (c *Client) ListProfiles(ctx context.Context) ([]model.Profile, error) {
	var out model.ChatProfileListReply
	err := c.chat(ctx, "profiles.list", model.ChatProfileListRequest{}, &out)
	return out.Profiles, err
}

// DeleteProfile deletes a profile and its stored key.
func (c *Client) DeleteProfile(ctx context.Context, name string) error {
	return c.chat(ctx, "profiles.delete", model.ChatProfileRef{Name: name}, nil)
}

// FollowChat delivers the events of a conversation to fn, in order, from
// the moment it returns (the subscription is confirmed by the server, so a
// message sent after it cannot outrun it) until stop. Events are not stored
// for replay: history comes from ChatHistory.
func (c *Client) FollowChat(conversation string, fn func(model.ChatEvent)) (stop func(), err error) {
	if !model.ValidConversationID(conversation) {
		return nil, apierr.Invalid("conversation", "conversation must be a slug or a uuid")
	}
	sub, err := c.nc.Subscribe(c.subj.Event("chat", conversation), func(m *nats.Msg) {
		var ev model.ChatEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			fn(ev)
		}
	})
	if err != nil {
		return nil, apierr.Wrap(apierr.Network, "subscribing to chat events", err)
	}
	if err := c.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, apierr.Wrap(apierr.Network, "subscribing to chat events", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}
