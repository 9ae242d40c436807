package chat

import (
	"context"

	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/profiles"
)

// The profile endpoints: mcp.v1.chat.profiles.{put,get,list,delete}. A key
// arrives only sealed to the credential service and is forwarded unopened.

func (s *Service) handleProfilePut(ctx context.Context, req micro.Request) (any, error) {
	var in model.ChatProfilePutRequest
	if err := decode(req, &in); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	return s.profiles.Put(ctx, in.Profile, profiles.APIKey{Sealed: in.SealedSecrets, Remove: in.RemoveAPIKey})
}

func (s *Service) handleProfileGet(ctx context.Context, req micro.Request) (any, error) {
	var in model.ChatProfileRef
	if err := decode(req, &in); err != nil {
		return nil, err
	}
	if e := in.Validate(); e != nil {
		return nil, e
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	return s.profiles.Get(ctx, in.Name)
}

func (s *Service) handleProfileList(ctx context.Context, req micro.Request) (any, error) {
	var in model.ChatProfileListRequest
	if err := decode(req, &in); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	list, err := s.profiles.List(ctx)
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []model.Profile{}
	}
	return model.ChatProfileListReply{Profiles: list}, nil
}

func (s *Service) handleProfileDelete(ctx context.Context, req micro.Request) (any, error) {
	var in model.ChatProfileRef
	if err := decode(req, &in); err != nil {
		return nil, err
	}
	if e := in.Validate(); e != nil {
		return nil, e
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultRequestTimeout)
	defer cancel()
	if err := s.profiles.Delete(ctx, in.Name); err != nil {
		return nil, err
	}
	return in, nil
}
