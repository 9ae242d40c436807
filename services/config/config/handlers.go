package config

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

func (s *Service) handleCreate(ctx context.Context, req micro.Request) (any, error) {
	var in model.ConfigCreateRequest
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	ctx, end, cancel := s.writeCtx(ctx)
	defer cancel()
	cfg := in.Config
	if cfg.ID == "" {
		cfg.ID = uuid.NewString()
	} else {
		u, err := uuid.Parse(cfg.ID)
		if err != nil {
			return nil, apierr.Invalid("id", "id must be a uuid (or left out)")
		}
		cfg.ID = u.String()
		if e := model.RefuseServerID(cfg.ID); e != nil {
			return nil, e
		}
		used, err := s.idUsed(ctx, cfg.ID)
		if err != nil {
			return nil, err
		}
		if used {
			return nil, apierr.Newf(apierr.Conflict, "config id %s is already in use", cfg.ID).WithField("id")
		}
	}
	now := time.Now().UTC()
	cfg.CreatedAt, cfg.UpdatedAt, cfg.Revision = now, now, 0
	p, err := s.prepare(ctx, cfg, in.Secrets, in.SealedSecrets, "")
	if err != nil {
		return nil, err
	}
	finish, err := s.commitOne(ctx, end, p)
	if err != nil {
		return nil, err
	}
	finish(ctx)
	s.log.Info("config created", "server", p.cfg.Slug, "id", p.cfg.ID, "revision", p.cfg.Revision, "request_id", requestID(req))
	s.publish(model.ConfigCreated, &p.cfg, requestID(req))
	return p.cfg, nil
}

func (s *Service) handleGet(ctx context.Context, req micro.Request) (any, error) {
	var in model.ConfigRef
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	return s.find(ctx, in.Server)
}

func (s *Service) handleList(ctx context.Context, req micro.Request) (any, error) {
	var in struct{}
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	all, err := s.all(ctx)
	if err != nil {
		return nil, err
	}
	if all == nil {
		all = []model.McpConfig{}
	}
	return model.ConfigListReply{Configs: all}, nil
}

func (s *Service) handleUpdate(ctx context.Context, req micro.Request) (any, error) {
	var in model.ConfigUpdateRequest
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	ctx, end, cancel := s.writeCtx(ctx)
	defer cancel()
	cfg := in.Config
	var prev *model.McpConfig
	var err error
	switch {
	case cfg.ID != "":
		if _, perr := uuid.Parse(cfg.ID); perr != nil {
			return nil, apierr.Invalid("id", "id must be a uuid")
		}
		prev, err = s.load(ctx, cfg.ID)
	case cfg.Slug != "":
		prev, err = s.find(ctx, cfg.Slug)
	default:
		return nil, apierr.Invalid("id", "id or slug is required to find the config to update")
	}
	if err != nil {
		return nil, err
	}
	if cfg.Revision != 0 && cfg.Revision != prev.Revision {
		return nil, apierr.Newf(apierr.Conflict, "config %s changed since revision %d; get it again", prev.Slug, cfg.Revision).WithField("revision")
	}
	cfg.ID, cfg.CreatedAt, cfg.UpdatedAt = prev.ID, prev.CreatedAt, time.Now().UTC()
	if cfg.Slug == "" {
		cfg.Slug = prev.Slug // a new name alone does not rename the server
	}
	if cfg.AuthType == "" {
		cfg.AuthType = prev.AuthType // left out: keep how the stored secrets are used
	}
	p, err := s.prepare(ctx, cfg, in.Secrets, in.SealedSecrets, prev.ID)
	if err != nil {
		return nil, err
	}
	p.prev, p.lastRev = prev, prev.Revision
	finish, err := s.commitOne(ctx, end, p)
	if err != nil {
		return nil, err
	}
	finish(ctx)
	s.log.Info("config updated", "server", p.cfg.Slug, "id", p.cfg.ID, "revision", p.cfg.Revision, "request_id", requestID(req))
	s.publish(model.ConfigUpdated, &p.cfg, requestID(req))
	return p.cfg, nil
}

func (s *Service) handleDelete(ctx context.Context, req micro.Request) (any, error) {
	var in model.ConfigRef
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	cfg, err := s.deleteConfig(ctx, in.Server)
	if err != nil {
		return nil, err
	}
	for _, kv := range []jetstream.KeyValue{s.assets.Status, s.assets.Tools} {
		if err := kv.Delete(ctx, cfg.Slug); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			s.log.Warn("removing runtime state of a deleted server failed", "server", cfg.Slug, "bucket", kv.Bucket(), "error", err)
		}
	}
	s.freeSlug(ctx, cfg.Slug, cfg.ID)
	s.log.Info("config deleted", "server", cfg.Slug, "id", cfg.ID, "request_id", requestID(req))
	ev := *cfg
	ev.Enabled, ev.Revision, ev.Version = false, 0, 0
	s.publish(model.ConfigDeleted, &ev, requestID(req))
	return model.ConfigDeleteReply{ID: cfg.ID, Server: cfg.Slug}, nil
}

// deleteConfig deletes the config ref names and its secrets, and returns it
// as it was deleted. The delete is at the revision read: a write in between
// (a rename, new secrets) is read again and deleted in turn, so the cleanup
// after it (runtime state, slug, event) is of what was deleted.
func (s *Service) deleteConfig(ctx context.Context, ref string) (*model.McpConfig, error) {
	for range 5 {
		cfg, err := s.find(ctx, ref)
		if err != nil {
			return nil, err
		}
		// Secrets first, rather than leaving secrets of a config that is
		// gone: with the credential service away the delete is refused and
		// nothing changes. The secrets are several records (the server's,
		// its OAuth client secret, its principals'), removed one at a time:
		// when the store fails partway, some may be gone, but the server's
		// own record goes last, the config stays, the error says so, and
		// the delete run again finishes it.
		if err := s.credDelete(ctx, cfg.ID, nil); err != nil {
			return nil, err
		}
		// Delete, not purge: the history stays for rollback. The runner stops the server.
		err = s.assets.Configs.Delete(ctx, cfg.ID, jetstream.LastRevision(cfg.Revision))
		if err == nil {
			return cfg, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			// The secrets cannot be put back (this service never reads
			// them): the server cannot start until the delete is done.
			e := apierr.From(kvErr("deleting config "+cfg.Slug, err))
			return nil, apierr.Wrap(e.Code, "the secrets of server "+cfg.Slug+" were removed but its config was not deleted ("+
				e.Message+"); retry the delete", err)
		}
		ref = cfg.ID // changed since it was read: read it again (a rename keeps its id)
	}
	return nil, apierr.Newf(apierr.Conflict, "server %s is being changed by other requests; retry the delete", ref)
}

// setEnabled persists the enabled flag with compare-and-set, retrying when
// another writer got in between. wrote says whether it changed anything.
func (s *Service) setEnabled(ctx context.Context, ref string, enabled bool) (cfg *model.McpConfig, wrote bool, err error) {
	for range 10 {
		cfg, err = s.find(ctx, ref)
		if err != nil {
			return nil, false, err
		}
		if cfg.Enabled == enabled {
			return cfg, false, nil
		}
		last := cfg.Revision
		cfg.Enabled, cfg.UpdatedAt = enabled, time.Now().UTC()
		err = s.write(ctx, cfg, last)
		if err == nil {
			return cfg, true, nil
		}
		if apierr.Of(err) != apierr.Conflict {
			return nil, false, err
		}
	}
	return nil, false, apierr.Newf(apierr.Conflict, "server %s is being changed by other requests; try again", ref)
}

func (s *Service) handleDisable(ctx context.Context, req micro.Request) (any, error) {
	var in model.ConfigRef
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	cfg, wrote, err := s.setEnabled(ctx, in.Server, false)
	if err != nil {
		return nil, err
	}
	if wrote {
		s.log.Info("server disabled", "server", cfg.Slug, "id", cfg.ID, "request_id", requestID(req))
		s.publish(model.ConfigDisabled, cfg, requestID(req))
	}
	return cfg, nil
}

// handleEnable is the toggle flow (docs/design.md): persist enabled, start the
// server, and if it cannot start, put the flag back and return why.
func (s *Service) handleEnable(ctx context.Context, req micro.Request) (any, error) {
	var in model.ConfigRef
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	opCtx, cancel := s.opCtx(ctx)
	cfg, wrote, err := s.setEnabled(opCtx, in.Server, true)
	cancel()
	if err != nil {
		return nil, err
	}
	if wrote {
		s.publish(model.ConfigEnabled, cfg, requestID(req))
	}
	timeout := s.opts.StartTimeout
	if cfg.Runtime.StartTimeout > 0 {
		timeout = time.Duration(cfg.Runtime.StartTimeout) + 30*time.Second
	}
	// Answer before the caller gives up, so a failure is reverted and reported
	// rather than left enabled behind a timeout.
	timeout = bus.ReplyWithin(nats.Header(req.Headers()), timeout)
	startErr := s.awaitStart(ctx, cfg, timeout)
	if startErr == nil {
		s.log.Info("server enabled and started", "server", cfg.Slug, "id", cfg.ID, "request_id", requestID(req))
		return cfg, nil
	}
	reverted := wrote && s.revertEnable(ctx, cfg, requestID(req))
	s.log.Info("server did not start", "server", cfg.Slug, "id", cfg.ID, "code", apierr.Of(startErr), "reverted", reverted, "request_id", requestID(req))
	if reverted {
		startErr = withoutRestartNote(startErr)
	}
	return nil, startErr
}

// withoutRestartNote drops the runner's "next automatic restart at …" from
// the error of a start that failed while its restarts were under way: the
// enable was reverted, so the server is disabled and no restart comes.
func withoutRestartNote(err error) error {
	var e *apierr.Error
	if !errors.As(err, &e) {
		return err
	}
	msg, _, found := strings.Cut(e.Message, model.NextRestartNote)
	if !found {
		return err
	}
	return apierr.New(e.Code, msg).WithField(e.Field)
}

// awaitStart asks a runner to start slug until one does, the start fails for
// real, or timeout passes. "No runner owns it yet" and "still disabled" (the
// runner's view lags the write) are retried every 100–250 ms.
func (s *Service) awaitStart(ctx context.Context, cfg *model.McpConfig, timeout time.Duration) error {
	slug := cfg.Slug
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		var st model.Status
		err := bus.RequestJSON(ctx, s.nc, s.subj.Runtime("start"), model.RuntimeRequest{Server: slug}, &st, timeout)
		if err == nil && st.State == model.StateError {
			code := apierr.Code(st.Code)
			if !code.Valid() {
				code = apierr.ServiceUnavailable
			}
			err = apierr.New(code, st.Message)
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return startGaveUp(ctx, slug, timeout, last)
		}
		if c := apierr.Of(err); c != apierr.ServiceUnavailable && c != apierr.Conflict {
			return err
		}
		// A runner that tried and failed has the server in error: that is
		// the answer, and asking again would only spawn it again.
		if failed := s.startFailed(ctx, slug); failed != nil {
			return failed
		}
		if apierr.Of(err) == apierr.Conflict {
			// Only a lagging view is worth waiting for: someone may have disabled it since.
			if now, lerr := s.load(ctx, cfg.ID); lerr == nil && !now.Enabled {
				return err
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return startGaveUp(ctx, slug, timeout, last)
		case <-time.After(100*time.Millisecond + rand.N(150*time.Millisecond)):
		}
	}
}

// startFailed is the error of a server a runner tried to start and could not
// (its status is error), or nil when no runner has tried yet.
func (s *Service) startFailed(ctx context.Context, slug string) error {
	var st model.Status
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := bus.RequestJSON(ctx, s.nc, s.subj.Runtime("status"), model.RuntimeRequest{Server: slug}, &st, 2*time.Second); err != nil {
		return nil
	}
	if st.State != model.StateError {
		return nil
	}
	code := apierr.Code(st.Code)
	if !code.Valid() {
		code = apierr.ServiceUnavailable
	}
	return apierr.New(code, st.Message).WithField(st.Field)
}

func startGaveUp(ctx context.Context, slug string, timeout time.Duration, last error) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return apierr.New(apierr.ServiceUnavailable, "the config service is stopping; server "+slug+" was not started")
	}
	if last != nil {
		return last // the last answer says more than "timed out" (e.g. no runner owns it)
	}
	return apierr.Newf(apierr.Network, "server %s did not start within %s", slug, timeout.Round(time.Millisecond))
}

// revertEnable puts enabled back to false if the config is still the
// revision this request wrote; a later change by someone else stands.
func (s *Service) revertEnable(ctx context.Context, cfg *model.McpConfig, reqID string) bool {
	ctx, cancel := detached(ctx)
	defer cancel()
	back := *cfg
	back.Enabled, back.UpdatedAt = false, time.Now().UTC()
	if err := s.write(ctx, &back, cfg.Revision); err != nil {
		s.log.Warn("not reverting enabled: the config changed since or the store failed", "server", cfg.Slug, "error", err)
		return false
	}
	s.publish(model.ConfigDisabled, &back, reqID)
	return true
}

func (s *Service) handleHistory(ctx context.Context, req micro.Request) (any, error) {
	var in model.ConfigRef
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	_, entries, err := s.history(ctx, in.Server)
	if err != nil {
		return nil, err
	}
	out := model.ConfigHistoryReply{Revisions: make([]model.ConfigRevision, 0, len(entries))}
	nums := versions(entries)
	for i, e := range entries {
		r := model.ConfigRevision{Version: nums[i], Revision: e.Revision(), Operation: opName(e.Operation()), At: e.Created().UTC()}
		if e.Operation() == jetstream.KeyValuePut {
			if cfg, err := decodeEntry(e); err == nil {
				cfg.Version = nums[i]
				r.Config = cfg
			}
		}
		out.Revisions = append(out.Revisions, r)
	}
	return out, nil
}

// history returns the id and the KV history (oldest first) of a server. An
// id finds a deleted config too; a slug only a live one.
func (s *Service) history(ctx context.Context, ref string) (string, []jetstream.KeyValueEntry, error) {
	ref = strings.TrimSpace(ref)
	id := ""
	if u, err := uuid.Parse(ref); err == nil {
		if used, err := s.idUsed(ctx, u.String()); err != nil {
			return "", nil, err
		} else if used {
			id = u.String()
		}
	}
	if id == "" {
		cfg, err := s.find(ctx, ref)
		if err != nil {
			return "", nil, err
		}
		id = cfg.ID
	}
	entries, err := s.assets.Configs.History(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil, notFound(ref)
	}
	if err != nil {
		return "", nil, kvErr("reading history of "+ref, err)
	}
	return id, entries, nil
}

func opName(op jetstream.KeyValueOp) string {
	switch op {
	case jetstream.KeyValuePut:
		return "put"
	case jetstream.KeyValueDelete:
		return "delete"
	case jetstream.KeyValuePurge:
		return "purge"
	}
	return op.String()
}

// handleRollback makes a config what it was at an earlier revision: a new
// revision with the old value (a deleted config comes back).
func (s *Service) handleRollback(ctx context.Context, req micro.Request) (any, error) {
	var in model.ConfigRollbackRequest
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	// The server's own version, or (still accepted) the store's revision.
	field, want := "version", in.Version
	switch {
	case in.Version != 0 && in.Revision != 0:
		return nil, apierr.Invalid("version", "give version or revision, not both")
	case in.Version == 0 && in.Revision == 0:
		return nil, apierr.Invalid("version", "version is required (see the server's history)")
	case in.Revision != 0:
		field, want = "revision", in.Revision
	}
	ctx, end, cancel := s.writeCtx(ctx)
	defer cancel()
	id, entries, err := s.history(ctx, in.Server)
	if err != nil {
		return nil, err
	}
	nums := versions(entries)
	var target jetstream.KeyValueEntry
	targetVersion := uint64(0)
	for i, e := range entries {
		if (field == "version" && nums[i] == want) || (field == "revision" && e.Revision() == want) {
			target, targetVersion = e, nums[i]
		}
	}
	if target == nil {
		return nil, apierr.Newf(apierr.NotFound, "%s %d is not in the history of server %s", field, want, in.Server).WithField(field)
	}
	if target.Operation() != jetstream.KeyValuePut {
		return nil, apierr.Invalid(field, field+" "+strconv.FormatUint(want, 10)+" deleted the config; choose one that wrote it")
	}
	cfg, err := decodeEntry(target)
	if err != nil {
		return nil, err
	}
	latest := entries[len(entries)-1]
	var prev *model.McpConfig
	if latest.Operation() == jetstream.KeyValuePut {
		if prev, err = decodeEntry(latest); err != nil {
			return nil, err
		}
		if latest.Revision() == target.Revision() {
			prev.Version = nums[len(nums)-1]
			return prev, nil // already what was asked for
		}
	}
	cfg.ID, cfg.UpdatedAt = id, time.Now().UTC()
	p, err := s.prepare(ctx, *cfg, nil, model.SealedSecrets{}, id)
	if err != nil {
		return nil, err
	}
	p.prev, p.lastRev = prev, latest.Revision()
	finish, err := s.commitOne(ctx, end, p)
	if err != nil {
		return nil, err
	}
	finish(ctx)
	s.log.Info("config rolled back", "server", p.cfg.Slug, "id", id, "to_version", targetVersion, "version", p.cfg.Version, "revision", p.cfg.Revision, "request_id", requestID(req))
	s.publish(model.ConfigRolledBack, &p.cfg, requestID(req))
	return p.cfg, nil
}
