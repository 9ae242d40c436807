package chat

import (
	"context"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/chat/profiles"
)

// The profile endpoints: mcp.v1.chat.profiles.{put,get,list,delete}. A key
// arrives only sealed to the credential service and is forwarded unopened.
// Writes are admins' (profiles hold API keys and tool policies); an owned
// profile (Owner set) is visible only to its owner and admins, to anyone
// else it does not exist.

func adminOnly(ctx context.Context) error {
	if !caller(ctx).Admin {
		return apierr.New(apierr.Unauthorized, "only an admin may change chat profiles")
	}
	return nil
}

func (s *Service) putProfile(ctx context.Context, req model.ChatProfilePutRequest) (any, error) {
	if err := adminOnly(ctx); err != nil {
		return nil, err
	}
	return s.profiles.Put(ctx, req.Profile, profiles.APIKey{Sealed: req.SealedSecrets, Remove: req.RemoveAPIKey})
}

// profile reads a profile the caller may see.
func (s *Service) profile(ctx context.Context, name string) (model.Profile, error) {
	p, err := s.profiles.Get(ctx, name)
	if err != nil {
		return p, err
	}
	if !profileVisible(p, caller(ctx)) {
		return model.Profile{}, apierr.Newf(apierr.NotFound, "profile %s not found", name)
	}
	return p, nil
}

func (s *Service) getProfile(ctx context.Context, req model.ChatProfileRef) (any, error) {
	return s.profile(ctx, req.Name)
}

func (s *Service) listProfiles(ctx context.Context, _ model.ChatProfileListRequest) (any, error) {
	list, err := s.profiles.List(ctx)
	if err != nil {
		return nil, err
	}
	c := caller(ctx)
	out := []model.Profile{}
	for _, p := range list {
		if profileVisible(p, c) {
			out = append(out, p)
		}
	}
	return model.ChatProfileListReply{Profiles: out}, nil
}

func (s *Service) deleteProfile(ctx context.Context, req model.ChatProfileRef) (any, error) {
	if err := adminOnly(ctx); err != nil {
		return nil, err
	}
	if err := s.profiles.Delete(ctx, req.Name); err != nil {
		return nil, err
	}
	return req, nil
}
