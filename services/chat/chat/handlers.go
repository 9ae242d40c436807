package chat

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/loop"
)

// Send begins a turn: the user's message is in the log when it returns; the
// turn goes on in the background, its progress on the events subject. A new
// conversation becomes the caller's; another's is NOT_FOUND.
func (s *Service) Send(ctx context.Context, req model.ChatSendRequest) (model.ChatSendReply, error) {
	if e := req.Validate(); e != nil {
		return model.ChatSendReply{}, e
	}
	conv := req.Conversation
	if conv == "" {
		conv = uuid.NewString()
	}
	if _, _, err := s.access(ctx, conv, useAct); err != nil && !s.unclaimed(ctx, conv) {
		return model.ChatSendReply{}, err
	}
	entries, err := s.convs.Read(ctx, conv)
	if err != nil && apierr.Of(err) != apierr.NotFound {
		return model.ChatSendReply{}, err
	}
	name := req.Profile
	if name == "" {
		if name = loop.LastProfile(entries); name == "" {
			return model.ChatSendReply{}, apierr.Invalid("profile", "conversation "+conv+" does not exist: a new conversation needs a profile")
		}
	}
	if len(req.Context) > 0 && len(entries) > 0 {
		return model.ChatSendReply{}, apierr.Invalid("context", "only a new conversation takes context messages")
	}
	p, err := s.profile(ctx, name)
	if err != nil {
		return model.ChatSendReply{}, err
	}
	if !p.HasAPIKey && p.BaseURL == "" {
		return model.ChatSendReply{}, noKey(p.Name)
	}
	sender := caller(ctx)
	if err := s.overQuota(ctx, sender, sendSize(req)); err != nil {
		return model.ChatSendReply{}, err
	}
	h, err := s.takeLease(ctx, conv)
	if err != nil {
		return model.ChatSendReply{}, err
	}
	// Claimed under the lease, which a delete holds until it has freed the
	// id: a send that found the conversation its caller's just before a
	// delete removed the owner claims it anew here (or finds it another's),
	// rather than begin a log without an owner.
	owner, err := s.claim(ctx, conv)
	if err != nil {
		s.release(h)
		return model.ChatSendReply{}, err
	}
	if err := s.charge(ctx, conv, logSize(entries), sendSize(req)); err != nil {
		s.release(h)
		return model.ChatSendReply{}, err
	}
	t, err := s.engine.Begin(ctx, conv, p, req.Message, loop.BeginOptions{Context: req.Context, NoInput: req.NoInput, NoTools: req.NoTools, Sender: &sender})
	if err != nil {
		s.release(h)
		return model.ChatSendReply{}, err
	}
	s.start(ctx, h, t.ID(), t.Drive)
	s.audit(ctx, model.ChatAuditSend, conv, owner, t.ID(), false)
	return model.ChatSendReply{Conversation: conv, Turn: t.ID(), Events: s.subj.Event("chat", conv)}, nil
}

// unclaimed reports whether conv has no owner and no log: a new
// conversation, which a send may claim.
func (s *Service) unclaimed(ctx context.Context, conv string) bool {
	if _, found, err := s.ownerOf(ctx, conv); err != nil || found {
		return false
	}
	entries, err := s.convs.Read(ctx, conv)
	return apierr.Of(err) == apierr.NotFound || (err == nil && len(entries) == 0)
}

// Watch says whether the caller may follow conv's events (the gateway asks
// before it streams them), and from which one: the events of a conversation
// deleted before the caller's claim are not theirs. An id nobody has yet is
// NOT_FOUND, as another's is: a watch claims nothing (a claim of its own
// would never expire, count in no quota nor list, and tell the watcher
// whether an id is taken). The gateway streams such an id's events once a
// send made it the caller's (it asks again when one comes).
func (s *Service) Watch(ctx context.Context, req model.ChatWatchRequest) (any, error) {
	if _, _, err := s.access(ctx, req.Conversation, useRead); err != nil {
		return nil, err
	}
	owner, _, err := s.ownerRecord(ctx, req.Conversation)
	if err != nil {
		return nil, err
	}
	return model.ChatWatchReply{Conversation: req.Conversation, After: owner.After}, nil
}

// History is the conversation's log.
func (s *Service) History(ctx context.Context, req model.ChatHistoryRequest) (any, error) {
	if _, _, err := s.access(ctx, req.Conversation, useRead); err != nil {
		return nil, err
	}
	entries, err := s.convs.Read(ctx, req.Conversation)
	if err != nil {
		return nil, err
	}
	return model.ChatHistoryReply{Conversation: req.Conversation, Entries: entries}, nil
}

// List lists the caller's conversations; an admin's list has everyone's,
// each with its owner.
func (s *Service) List(ctx context.Context, _ model.ChatListRequest) (any, error) {
	all, err := s.convs.List(ctx)
	if err != nil {
		return nil, err
	}
	c := caller(ctx)
	list := []model.ChatConversation{}
	for _, cv := range all {
		owner, _, err := s.ownerOf(ctx, cv.Conversation)
		if err != nil {
			return nil, err
		}
		if c.Admin || owner == c.ID {
			cv.Owner = owner
			list = append(list, cv)
		}
	}
	return model.ChatListReply{Conversations: list}, nil
}

// Delete ends the conversation's running turn, then removes its log, its
// owner and its pending approvals and grants (its owner's or an admin's).
func (s *Service) Delete(ctx context.Context, conv string) error {
	owner, asAdmin, err := s.access(ctx, conv, useDelete)
	if err != nil {
		return err
	}
	// An id claimed by a send whose turn did not begin (or by a watch, as
	// they once did) has no log (NOT_FOUND here): deleting it frees the id.
	claimOnly := func(err error) bool { return owner != "" && apierr.Of(err) == apierr.NotFound }
	if _, err := s.cancel(ctx, model.ChatCancelRequest{Conversation: conv}); err != nil && !claimOnly(err) {
		return err
	}
	// The delete holds the conversation's lease until the id is freed: a
	// send meanwhile (the owner's) is refused CONFLICT, rather than begin a
	// log this delete would then leave without an owner (only admins could
	// reach it, and its charge would never be given back) or delete under
	// its running turn.
	h, err := s.takeLease(ctx, conv)
	if err != nil {
		return err
	}
	defer s.release(h)
	if err := s.publishDeleted(ctx, conv); err != nil {
		return err
	}
	s.refund(ctx, conv)
	if err := s.convs.Delete(ctx, conv); err != nil && !claimOnly(err) {
		return err
	}
	// The id is freed last: whoever claims it next must find none of this
	// conversation's grants or stored results, nor lose theirs to this
	// cleanup. Should one fail, the id stays its owner's until a delete
	// again gets through.
	if err := s.approvals.Forget(ctx, conv); err != nil {
		return apierr.Wrap(apierr.ServiceUnavailable, "the conversation's log is deleted, forgetting its approvals failed: delete it again", err)
	}
	if err := s.results.DeleteConversation(ctx, conv); err != nil {
		return apierr.Wrap(apierr.ServiceUnavailable, "the conversation's log is deleted, deleting its stored tool results failed: delete it again", err)
	}
	s.audit(ctx, model.ChatAuditDelete, conv, owner, "", asAdmin)
	s.forgetOwner(ctx, conv)
	return nil
}

// publishDeleted stores the conversation's last event, deleted, in the
// events stream before anything is removed: every stream still following
// the id ends there (the gateway's SSE), before the id is free for another
// principal, whose events come after it. Without the stream there is nothing
// to follow.
func (s *Service) publishDeleted(ctx context.Context, conv string) error {
	data, err := json.Marshal(model.ChatEvent{Kind: model.ChatEventDeleted, Conversation: conv, At: time.Now().UTC()})
	if err != nil {
		return err
	}
	_, err = s.js.Publish(ctx, s.subj.Event("chat", conv), data)
	if err != nil && !errors.Is(err, jetstream.ErrNoStreamResponse) {
		return apierr.Wrap(apierr.ServiceUnavailable, "ending the conversation's event streams failed", err)
	}
	return nil
}

func (s *Service) handleDelete(ctx context.Context, req model.ChatDeleteRequest) (any, error) {
	if err := s.Delete(ctx, req.Conversation); err != nil {
		return nil, err
	}
	return model.ChatConversationRef(req), nil
}

// Approve records a decision on a call awaiting approval.
func (s *Service) Approve(ctx context.Context, req model.ChatApproveRequest) (any, error) {
	owner, _, err := s.access(ctx, req.Conversation, useAct)
	if err != nil {
		return nil, err
	}
	if err := s.approvals.Decide(ctx, req); err != nil {
		return nil, err
	}
	s.audit(ctx, model.ChatAuditApprove, req.Conversation, owner, "", false)
	return model.ChatApproveReply(req), nil
}

// Answer records the user's answer to a server's request for input.
func (s *Service) Answer(ctx context.Context, req model.ChatAnswerRequest) (any, error) {
	owner, _, err := s.access(ctx, req.Conversation, useAct)
	if err != nil {
		return nil, err
	}
	if err := s.approvals.Answer(ctx, req); err != nil {
		return nil, err
	}
	s.audit(ctx, model.ChatAuditAnswer, req.Conversation, owner, "", false)
	return model.ChatAnswerReply(req), nil
}

// Pending lists the calls of a conversation awaiting approval and the
// servers' requests for input awaiting an answer.
func (s *Service) Pending(ctx context.Context, req model.ChatPendingRequest) (any, error) {
	if _, _, err := s.access(ctx, req.Conversation, useRead); err != nil {
		return nil, err
	}
	calls, err := s.approvals.Pending(ctx, req.Conversation)
	if err != nil {
		return nil, err
	}
	inputs, err := s.approvals.PendingInputs(ctx, req.Conversation)
	if err != nil {
		return nil, err
	}
	if inputs == nil {
		inputs = []model.ChatInput{}
	}
	return model.ChatPendingReply{Conversation: req.Conversation, Calls: calls, Inputs: inputs}, nil
}

// turnEnd is the ChatDone of the turn_end of turn in entries (nil: none).
func turnEnd(entries []model.ChatEntry, turn string) *model.ChatDone {
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if e.Turn == turn && e.Kind == model.EntryTurnEnd {
			var d model.ChatDone
			if json.Unmarshal(e.Payload, &d) != nil {
				return &model.ChatDone{Reason: model.TurnError}
			}
			return &d
		}
	}
	return nil
}
