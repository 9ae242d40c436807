package credential

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// ownerCheck answers whether a runner holds a lease on a server: defence in
// depth behind NATS, which lets only runners request cred.resolve at all.
type ownerCheck struct {
	nc   *nats.Conn
	skip bool

	mu      sync.Mutex
	configs jetstream.KeyValue
	owners  jetstream.KeyValue
}

// check refuses unless runner leases the server whose config id is id.
func (o *ownerCheck) check(ctx context.Context, runner, id string) error {
	if o.skip {
		return nil
	}
	if runner == "" {
		return apierr.Invalid("runner", "cred.resolve needs the resolving runner's id (runner)")
	}
	configs, owners, err := o.buckets(ctx)
	if err != nil {
		return err
	}
	e, err := configs.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return apierr.Newf(apierr.NotFound, "no server with id %s", id)
	}
	if err != nil {
		return apierr.Wrap(apierr.ServiceUnavailable, "reading the server's config", err)
	}
	var cfg model.McpConfig
	if err := json.Unmarshal(e.Value(), &cfg); err != nil || cfg.Slug == "" {
		return apierr.Newf(apierr.Internal, "the config of %s is unreadable", id)
	}
	keys, err := owners.ListKeysFiltered(ctx, "server."+cfg.Slug+".*")
	if err != nil {
		return apierr.Wrap(apierr.ServiceUnavailable, "reading the server's leases", err)
	}
	defer func() { _ = keys.Stop() }()
	for key := range keys.Keys() {
		l, err := owners.Get(ctx, key)
		if err != nil {
			continue
		}
		var lease struct {
			Runner string `json:"runner"`
		}
		if json.Unmarshal(l.Value(), &lease) == nil && lease.Runner == runner {
			return nil
		}
	}
	return apierr.Newf(apierr.Unauthorized, "runner %s does not own server %s", runner, cfg.Slug)
}

// buckets opens the config and lease buckets once (the config service and
// the runners create them).
func (o *ownerCheck) buckets(ctx context.Context) (jetstream.KeyValue, jetstream.KeyValue, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.configs != nil && o.owners != nil {
		return o.configs, o.owners, nil
	}
	js, err := jetstream.New(o.nc)
	if err != nil {
		return nil, nil, apierr.Wrap(apierr.Internal, "jetstream", err)
	}
	c, err := js.KeyValue(ctx, bus.BucketConfigs)
	if err != nil {
		return nil, nil, apierr.Wrap(apierr.ServiceUnavailable, "the config bucket is not there yet", err)
	}
	w, err := js.KeyValue(ctx, bus.BucketOwners)
	if err != nil {
		return nil, nil, apierr.Wrap(apierr.ServiceUnavailable, "the lease bucket is not there yet", err)
	}
	o.configs, o.owners = c, w
	return c, w, nil
}

// audit publishes who resolved which server's secrets and how it ended
// (never a value) into MCP_EVENTS.
func (s *Service) audit(id, runner, via string, err error) {
	ev := model.CredEvent{Type: model.CredResolved, ServerID: id, Runner: runner, Via: via, At: time.Now().UTC()}
	if err != nil {
		ev.Type, ev.Code = model.CredRefused, string(apierr.Of(err))
	}
	data, jerr := json.Marshal(ev)
	if jerr != nil {
		return
	}
	if perr := s.nc.Publish(s.subj.Event("cred", id), data); perr != nil {
		s.log.Warn("publishing the resolve audit event", "error", perr)
	}
}
