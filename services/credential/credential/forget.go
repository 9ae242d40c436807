package credential

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

// VerbForget deletes every per-principal record of one principal
// (mcpbus up's host, when it revokes an agent).
const VerbForget = credclient.VerbForget

// handleForget deletes the records of kind principal of in.Principal, one
// per configured server: a record's id derives from its server and its
// principal (model.PrincipalCredentialID), so the configured servers (KV
// mcp_configs) name every record the principal could still use; a server's
// delete removed its principals' records already. A record written before
// records kept their server is found the same way. Each record deleted is
// a change event, so the runners close the principal's upstream sessions.
// Only mcpbus up's host may ask (libs/access): an agent's name is given
// again after its revocation, and the next agent of the name must not call
// upstream with the revoked one's tokens.
func (s *Service) handleForget(ctx context.Context, data []byte) (string, any, error) {
	var in model.CredForgetRequest
	if err := bus.Decode(data, &in); err != nil {
		return "", nil, err
	}
	if err := checkPrincipal(in.Principal); err != nil || in.Principal == "" {
		return "", nil, apierr.Invalid("principal", "principal must be a principal id (at most 512 printable characters)")
	}
	servers, err := s.owner.serverIDs(ctx)
	if err != nil {
		return "", nil, err
	}
	out := model.CredForgetReply{Principal: in.Principal}
	for _, server := range servers {
		r := ref{kind: model.CredPrincipal, id: model.PrincipalCredentialID(server, in.Principal)}
		gone, err := s.removeIfStored(ctx, r)
		if err != nil {
			return "", out, apierr.Wrap(apierr.From(err).Code, fmt.Sprintf("deleting the credentials of %s for server %s (%d deleted before it; ask again to finish)", in.Principal, server, out.Removed), err)
		}
		if gone {
			out.Removed++
			s.changed(r, VerbDelete)
		}
	}
	if out.Removed > 0 {
		s.log.Info("a principal's own credentials removed", "principal", in.Principal, "records", out.Removed)
	}
	return "", out, nil
}

// removeIfStored deletes r's record under its lock when there is one.
func (s *Service) removeIfStored(ctx context.Context, r ref) (bool, error) {
	unlock, err := s.locks.lock(ctx, r.key())
	if err != nil {
		return false, err
	}
	defer unlock()
	if _, _, err := s.store.Get(ctx, r.key()); errors.Is(err, store.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, s.remove(ctx, r)
}

// serverIDs are the ids of every configured server (the keys of KV
// mcp_configs); none when the bucket is not there yet.
func (o *ownerCheck) serverIDs(ctx context.Context) ([]string, error) {
	js, err := jetstream.New(o.nc)
	if err != nil {
		return nil, apierr.Wrap(apierr.Internal, "jetstream", err)
	}
	configs, err := bus.BindKV(ctx, js, bus.BucketConfigs)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, apierr.Wrap(apierr.ServiceUnavailable, "reading the configured servers", err)
	}
	ids, err := configs.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, apierr.Wrap(apierr.ServiceUnavailable, "listing the configured servers", err)
	}
	return ids, nil
}
