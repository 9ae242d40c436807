package chat

import (
	"context"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/profiles"
)

// The profile endpoints: mcp.v1.chat.profiles.{put,get,list,delete}. A key
// arrives only sealed to the credential service and is forwarded unopened.

func (s *Service) putProfile(ctx context.Context, req model.ChatProfilePutRequest) (any, error) {
	return s.profiles.Put(ctx, req.Profile, profiles.APIKey{Sealed: req.SealedSecrets, Remove: req.RemoveAPIKey})
}

func (s *Service) getProfile(ctx context.Context, req model.ChatProfileRef) (any, error) {
	return s.profiles.Get(ctx, req.Name)
}

func (s *Service) listProfiles(ctx context.Context, _ model.ChatProfileListRequest) (any, error) {
	list, err := s.profiles.List(ctx)
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []model.Profile{}
	}
	return model.ChatProfileListReply{Profiles: list}, nil
}

func (s *Service) deleteProfile(ctx context.Context, req model.ChatProfileRef) (any, error) {
	if err := s.profiles.Delete(ctx, req.Name); err != nil {
		return nil, err
	}
	return req, nil
}
