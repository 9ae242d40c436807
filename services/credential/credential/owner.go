package credential

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nkeys"
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

// proofSkew bounds how old (or how far ahead) a resolve's signature may be.
const proofSkew = 2 * time.Minute

// check refuses unless the requester holds a lease on the server whose
// config id is in.ServerID: the lease names in.Runner, and when it names a
// key too (a runner with a bus identity), the request is signed with that
// key. A request that only says a runner's id gets nothing.
func (o *ownerCheck) check(ctx context.Context, in model.CredResolveRequest) error {
	runner, id := in.Runner, in.ServerID
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
	// Only the leases the runners make count: server.<slug>.<replica> for
	// each replica the config asks for. Any runner may write the bucket, so
	// a lease under a replica beyond those (server.<slug>.7 of a server of
	// one replica) would let a runner resolve a server nobody gave it,
	// without displacing the holder of a real replica.
	for replica := range replicasOf(cfg) {
		l, err := owners.Get(ctx, fmt.Sprintf("%s%s.%d", model.LeaseKeyPrefix, cfg.Slug, replica))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return apierr.Wrap(apierr.ServiceUnavailable, "reading the server's leases", err)
		}
		var lease model.Lease
		if json.Unmarshal(l.Value(), &lease) != nil || lease.Runner != runner {
			continue
		}
		if lease.Key == "" {
			return nil // a runner without a bus identity: its id is all there is
		}
		return proven(in, lease.Key, cfg.Slug)
	}
	return apierr.Newf(apierr.Unauthorized, "runner %s does not own server %s", runner, cfg.Slug)
}

// replicasOf is how many replicas of cfg the runners lease (as the runner
// counts them: runtime.replicas, at least one).
func replicasOf(cfg model.McpConfig) int {
	return max(cfg.Runtime.Replicas, 1)
}

// proven checks in's signature against key, the lease holder's nkey.
func proven(in model.CredResolveRequest, key, slug string) error {
	refused := func(why string) error {
		return apierr.Newf(apierr.Unauthorized, "cred.resolve of server %s in the name of runner %s refused: %s", slug, in.Runner, why)
	}
	if in.RunnerKey != key {
		return refused("not signed by the key its lease names")
	}
	if d := time.Since(time.UnixMilli(in.SignedAt)); d > proofSkew || d < -proofSkew {
		return refused("the signature's time is more than 2 minutes off")
	}
	sig, err := base64.RawURLEncoding.DecodeString(in.Signature)
	if err != nil {
		return refused("the signature is not base64url")
	}
	pub, err := nkeys.FromPublicKey(key)
	if err != nil {
		return refused("the lease's key is not an nkey")
	}
	if err := pub.Verify(in.ProofMessage(), sig); err != nil {
		return refused("the signature does not verify")
	}
	return nil
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
	c, err := bus.BindKV(ctx, js, bus.BucketConfigs)
	if err != nil {
		return nil, nil, apierr.Wrap(apierr.ServiceUnavailable, "the config bucket is not there yet", err)
	}
	w, err := bus.BindKV(ctx, js, bus.BucketOwners)
	if err != nil {
		return nil, nil, apierr.Wrap(apierr.ServiceUnavailable, "the lease bucket is not there yet", err)
	}
	o.configs, o.owners = c, w
	return c, w, nil
}

// audit publishes who resolved which server's secrets and how it ended
// (never a value) into MCP_EVENTS.
func (s *Service) audit(id, runner, principal, via string, err error) {
	s.met.resolved(via, err)
	ev := model.CredEvent{Type: model.CredResolved, ServerID: id, Runner: runner, Principal: principal, Via: via, At: time.Now().UTC()}
	if err != nil {
		ev.Type, ev.Code = model.CredRefused, string(apierr.Of(err))
	}
	data, jerr := json.Marshal(ev)
	if jerr != nil {
		return
	}
	s.opts.Audit.Append(s.subj.Event("cred", id), data)
	if perr := s.nc.Publish(s.subj.Event("cred", id), data); perr != nil {
		s.log.Warn("publishing the resolve audit event", "error", perr)
	}
}

// changed publishes that r's record was written or removed (via set,
// delete or refresh), never what it holds: runners fetch the fingerprint
// feed again on it (feed.go). It joins the audit chain as a resolve does.
func (s *Service) changed(r ref, via string) {
	data, err := json.Marshal(model.CredEvent{Type: model.CredChanged, ServerID: r.id, Via: via, At: time.Now().UTC()})
	if err != nil {
		return
	}
	s.opts.Audit.Append(s.subj.Event("cred", r.id), data)
	if perr := s.nc.Publish(s.subj.Event("cred", r.id), data); perr != nil {
		s.log.Warn("publishing the change event", "error", perr)
	}
}
