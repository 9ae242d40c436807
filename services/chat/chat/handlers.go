package chat

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/loop"
)

// Send begins a turn: the user's message is in the log when it returns; the
// turn goes on in the background, its progress on the events subject.
func (s *Service) Send(ctx context.Context, req model.ChatSendRequest) (model.ChatSendReply, error) {
	if e := req.Validate(); e != nil {
		return model.ChatSendReply{}, e
	}
	conv := req.Conversation
	if conv == "" {
		conv = uuid.NewString()
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
	p, err := s.profiles.Get(ctx, name)
	if err != nil {
		return model.ChatSendReply{}, err
	}
	if !p.HasAPIKey && p.BaseURL == "" {
		return model.ChatSendReply{}, noKey(p.Name)
	}
	h, err := s.takeLease(ctx, conv)
	if err != nil {
		return model.ChatSendReply{}, err
	}
	t, err := s.engine.Begin(ctx, conv, p, req.Message, req.Context)
	if err != nil {
		s.release(h)
		return model.ChatSendReply{}, err
	}
	s.start(h, t.ID(), t.Drive)
	return model.ChatSendReply{Conversation: conv, Turn: t.ID(), Events: s.subj.Event("chat", conv)}, nil
}

func (s *Service) handleSend(ctx context.Context, req micro.Request) (any, error) {
	var in model.ChatSendRequest
	if err := decode(req, &in); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	return s.Send(ctx, in)
}

func (s *Service) handleHistory(ctx context.Context, req micro.Request) (any, error) {
	var in model.ChatHistoryRequest
	if err := decode(req, &in); err != nil {
		return nil, err
	}
	if e := in.Validate(); e != nil {
		return nil, e
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	entries, err := s.convs.Read(ctx, in.Conversation)
	if err != nil {
		return nil, err
	}
	return model.ChatHistoryReply{Conversation: in.Conversation, Entries: entries}, nil
}

func (s *Service) handleList(ctx context.Context, req micro.Request) (any, error) {
	var in model.ChatListRequest
	if err := decode(req, &in); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	list, err := s.convs.List(ctx)
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []model.ChatConversation{}
	}
	return model.ChatListReply{Conversations: list}, nil
}

// Delete ends the conversation's running turn, then removes its log and
// its pending approvals and grants.
func (s *Service) Delete(ctx context.Context, conv string) error {
	if _, err := s.Cancel(ctx, model.ChatCancelRequest{Conversation: conv}); err != nil {
		return err
	}
	if err := s.convs.Delete(ctx, conv); err != nil {
		return err
	}
	if err := s.approvals.Forget(ctx, conv); err != nil {
		s.log.Warn("chat: forgetting the approvals of a deleted conversation failed", "conversation", conv, "err", err)
	}
	if err := s.results.DeleteConversation(ctx, conv); err != nil {
		s.log.Warn("chat: deleting the stored tool results of a deleted conversation failed", "conversation", conv, "err", err)
	}
	return nil
}

func (s *Service) handleDelete(ctx context.Context, req micro.Request) (any, error) {
	var in model.ChatDeleteRequest
	if err := decode(req, &in); err != nil {
		return nil, err
	}
	if e := in.Validate(); e != nil {
		return nil, e
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	if err := s.Delete(ctx, in.Conversation); err != nil {
		return nil, err
	}
	return model.ChatConversationRef(in), nil
}

func (s *Service) handleCancel(ctx context.Context, req micro.Request) (any, error) {
	var in model.ChatCancelRequest
	if err := decode(req, &in); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	return s.Cancel(ctx, in)
}

func (s *Service) handleApprove(ctx context.Context, req micro.Request) (any, error) {
	var in model.ChatApproveRequest
	if err := decode(req, &in); err != nil {
		return nil, err
	}
	if e := in.Validate(); e != nil {
		return nil, e
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	if err := s.approvals.Decide(ctx, in); err != nil {
		return nil, err
	}
	return model.ChatApproveReply(in), nil
}

func (s *Service) handlePending(ctx context.Context, req micro.Request) (any, error) {
	var in model.ChatPendingRequest
	if err := decode(req, &in); err != nil {
		return nil, err
	}
	if e := in.Validate(); e != nil {
		return nil, e
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	calls, err := s.approvals.Pending(ctx, in.Conversation)
	if err != nil {
		return nil, err
	}
	return model.ChatPendingReply{Conversation: in.Conversation, Calls: calls}, nil
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
