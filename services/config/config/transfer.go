package config

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/serverfile"
)

// handleImport writes every server of a file or none: all entries are
// checked before the first write, and a write that fails undoes the ones
// before it.
func (s *Service) handleImport(ctx context.Context, req micro.Request) (any, error) {
	var in model.ConfigImportRequest
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	entries, err := importEntries(&in)
	if err != nil {
		return nil, err
	}
	ctx, end, cancel := s.writeCtx(ctx)
	defer cancel()
	existing, err := s.all(ctx)
	if err != nil {
		return nil, err
	}
	bySlug := make(map[string]*model.McpConfig, len(existing))
	for i := range existing {
		bySlug[existing[i].Slug] = &existing[i]
	}

	now := time.Now().UTC()
	plans := make([]*plan, 0, len(entries))
	seenSlug := map[string]int{}
	seenID := map[string]bool{}
	for i, entry := range entries {
		field := fmt.Sprintf("servers[%d]", i)
		cfg := entry.Config
		if in.Enabled != nil {
			cfg.Enabled = *in.Enabled
		}
		cfg.Revision = 0
		probe := cfg
		probe.Normalize()
		if j, dup := seenSlug[probe.Slug]; dup && probe.Slug != "" {
			return nil, apierr.Newf(apierr.Conflict, "slug %s appears twice in the file (servers[%d] and servers[%d])", probe.Slug, j, i).WithField(field + ".slug")
		}
		seenSlug[probe.Slug] = i
		prev := bySlug[probe.Slug]
		credID := ""
		switch {
		case prev != nil && !in.Replace:
			e := slugConflict(probe.Slug, prev.ID)
			e.Message += "; import with replace (mcpbus servers import --replace) to update it"
			return nil, e.WithField(field + ".slug")
		case prev != nil:
			cfg.ID, cfg.CreatedAt, cfg.UpdatedAt = prev.ID, prev.CreatedAt, now
			if cfg.AuthType == "" {
				cfg.AuthType = prev.AuthType
			}
			credID = prev.ID
		default:
			if err := s.importID(ctx, &cfg, seenID); err != nil {
				return nil, prefixed(err, field)
			}
			cfg.CreatedAt, cfg.UpdatedAt = now, now
		}
		seenID[cfg.ID] = true
		p, err := s.prepare(ctx, cfg, entry.clear, entry.sealed, credID)
		if err != nil {
			return nil, prefixed(err, field)
		}
		if prev != nil {
			p.prev, p.lastRev = prev, prev.Revision
		}
		plans = append(plans, p)
	}

	undos := make([]*undo, 0, len(plans))
	finishes := make([]func(context.Context), 0, len(plans))
	for i, p := range plans {
		u, finish, err := s.commit(ctx, p)
		undos = append(undos, u)
		if err != nil {
			stayed := s.undoWrites(ctx, end, undos)
			s.log.Info("import failed and was undone", "server", p.cfg.Slug, "written_before", i, "stayed", stayed, "error", err, "request_id", requestID(req))
			if len(stayed) > 0 {
				err = s.stayedWritten(err, stayed, plans[:i], requestID(req))
			}
			return nil, prefixed(err, fmt.Sprintf("servers[%d]", i))
		}
		finishes = append(finishes, finish)
	}
	out := model.ConfigImportReply{Created: []model.McpConfig{}, Updated: []model.McpConfig{}}
	var published <-chan struct{}
	for i, p := range plans {
		finishes[i](ctx)
		if p.prev != nil {
			out.Updated = append(out.Updated, p.cfg)
		} else {
			out.Created = append(out.Created, p.cfg)
		}
		published = s.emit(writeEvent(p), &p.cfg, requestID(req))
	}
	s.awaitEvent(published) // in order: the last one stored, all are
	s.log.Info("configs imported", "created", len(out.Created), "updated", len(out.Updated), "request_id", requestID(req))
	return out, nil
}

// writeEvent is the event type of a committed plan.
func writeEvent(p *plan) string {
	if p.prev != nil {
		return model.ConfigUpdated
	}
	return model.ConfigCreated
}

// stayedWritten is the error of an import whose undo left servers written
// (the KV failed): the caller learns which, and their events are published,
// since their writes stand.
func (s *Service) stayedWritten(err error, stayed []string, written []*plan, reqID string) error {
	for _, p := range written {
		if slices.Contains(stayed, p.cfg.Slug) {
			s.publish(writeEvent(p), &p.cfg, reqID)
		}
	}
	e := apierr.From(err)
	return apierr.Wrap(e.Code, e.Message+"; undoing the servers written before failed, these stay written: "+
		strings.Join(stayed, ", "), err).WithField(e.Field)
}

// importEntry is one server of an import: its config and its secrets,
// sealed (entries) or in clear (parsed from content: refused by prepare).
type importEntry struct {
	Config model.McpConfig
	sealed model.SealedSecrets
	clear  *model.Credentials
}

// importEntries reads the servers of an import: the parsed entries a writer
// sent (their secrets sealed), or the content parsed here.
func importEntries(in *model.ConfigImportRequest) ([]importEntry, error) {
	if len(in.Entries) > 0 {
		if strings.TrimSpace(in.Content) != "" || in.Format != "" || len(in.Vars) > 0 {
			return nil, apierr.Invalid("entries", "entries come instead of content, format and vars")
		}
		out := make([]importEntry, len(in.Entries))
		for i, e := range in.Entries {
			out[i] = importEntry{Config: e.Config, sealed: e.SealedSecrets}
		}
		return out, nil
	}
	if strings.TrimSpace(in.Content) == "" {
		return nil, apierr.Invalid("content", "content is required")
	}
	parsed, err := serverfile.Parse(in.Format, []byte(in.Content), in.Vars)
	if err != nil {
		return nil, asValidation(err, "content")
	}
	if len(parsed) == 0 {
		return nil, apierr.Invalid("content", "the file has no servers")
	}
	out := make([]importEntry, len(parsed))
	for i, e := range parsed {
		out[i] = importEntry{Config: e.Config, clear: &e.Secrets}
	}
	return out, nil
}

// importID keeps the id an entry brings when it is a uuid not in use (a
// restore keeps its ids) and gives the others a new one.
func (s *Service) importID(ctx context.Context, cfg *model.McpConfig, seen map[string]bool) error {
	if cfg.ID == "" {
		cfg.ID = uuid.NewString()
		return nil
	}
	u, err := uuid.Parse(cfg.ID)
	if err != nil {
		return apierr.Invalid("id", "id must be a uuid (or left out)")
	}
	cfg.ID = u.String()
	if e := model.RefuseServerID(cfg.ID); e != nil {
		return e
	}
	used, err := s.idUsed(ctx, cfg.ID)
	if err != nil {
		return err
	}
	if used || seen[cfg.ID] {
		return apierr.Newf(apierr.Conflict, "config id %s is already in use", cfg.ID).WithField("id")
	}
	return nil
}

// asValidation keeps a parser's contract error, and makes anything else a
// VALIDATION_ERROR about field (a file that cannot be read is the caller's).
func asValidation(err error, field string) error {
	e := apierr.From(err)
	if e.Code == apierr.Internal {
		return apierr.Invalid(field, err.Error())
	}
	return e
}

// handleExport renders the chosen servers (all when none are named). Stored
// configs hold no secret values; any a config written straight to KV carries
// are taken out first, so the file only ever has ${VAR} placeholders.
func (s *Service) handleExport(ctx context.Context, req micro.Request) (any, error) {
	var in model.ConfigExportRequest
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	format := in.Format
	if format == "" {
		format = model.FormatServers
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	var configs []model.McpConfig
	if len(in.Servers) == 0 {
		all, err := s.all(ctx)
		if err != nil {
			return nil, err
		}
		configs = all
	} else {
		seen := map[string]bool{}
		for i, ref := range in.Servers {
			cfg, err := s.find(ctx, ref)
			if err != nil {
				if e := apierr.From(err); e.Code == apierr.NotFound || e.Code == apierr.Validation {
					return nil, e.WithField(fmt.Sprintf("servers[%d]", i))
				}
				return nil, err
			}
			if !seen[cfg.ID] {
				seen[cfg.ID] = true
				configs = append(configs, *cfg)
			}
		}
	}
	for i := range configs {
		_ = extractSecrets(&configs[i], nil) // values dropped, names kept as references
	}
	data, err := serverfile.Render(format, configs)
	if err != nil {
		return nil, asValidation(err, "format")
	}
	return model.ConfigExportReply{Format: format, Content: string(data), Warnings: serverfile.Dropped(format, configs)}, nil
}
