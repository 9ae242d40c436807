package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"golang.org/x/time/rate"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// Tool pinning (model.PinPolicy): the first definition of each tool is
// pinned in KV mcp_pins; a later one that differs is recorded as pending
// and, under strict, withheld — out of the catalog, of rpc tools/list, and
// its calls answered with an isError result — until approved on
// tools.approve. Under warn it is re-pinned and announced. Every change
// publishes events.tool_changed.<server> once per new definition.

// defaultPinBudget is a server's pin budget (Options.PinBudget,
// server.pinBudget): a full tool list (maxTools) twice over at once,
// refilled at that much a day. Past it, a new or changed tool is neither
// pinned nor announced, and is withheld whatever the policy (under warn a
// server that spent its budget could otherwise change a tool unseen)
// until the budget lets it be recorded.
const defaultPinBudget = 2 * maxTools

// newPinBudget is a budget of n a day, n at once.
func newPinBudget(n int) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(float64(n)/(24*60*60)), n)
}

// applyPins checks the server's current tools against their pins again
// (a review was recorded) and sets which are withheld. It runs on the
// server's goroutine, as every change of the tools does.
func (s *server) applyPins(ctx context.Context) {
	s.mu.RLock()
	tools := maps.Clone(s.tools)
	s.mu.RUnlock()
	withheld := s.withheldOf(ctx, tools)
	s.mu.Lock()
	s.withheld = withheld
	s.mu.Unlock()
}

// recheckPins checks the tools of a running server against their pins
// again (a review was recorded) and publishes its catalog; with relearn, an
// idle one, whose tools come from the catalog, starts to learn them again
// (an idle replica that is not asked checks them at its next start anyway).
// It runs on the server's goroutine.
func (s *server) recheckPins(ctx context.Context, relearn bool) error {
	switch s.status().State {
	case model.StateRunning:
		s.applyPins(ctx)
		s.publishCatalog()
	case model.StateIdle:
		if relearn {
			s.stop(model.StateStopped, false)
			return s.start(ctx)
		}
	}
	return nil
}

// watchPins has every replica check its tools again when one of their pins
// is reviewed (its pinned hash changes). tools.approve asks the server's
// owner on the control subject, which one replica answers (the replicas'
// queue group): the others went on withholding an approved tool. So does a
// replica that, starting at the same moment as another, recorded a tool as
// new since a review when the other pinned it at first sight
// (settleFirstSight turns that record into the pin).
func (r *Runner) watchPins(ctx context.Context) {
	hashes := map[string]string{} // pin key → pinned hash; FollowKV calls one at a time
	// A review's outcome has nothing pending (an approval moves the pending
	// hash to the pin, a first sight settled has none); a record with a
	// change pending is a change seen, for a review to decide, not one.
	hashOf := func(e jetstream.KeyValueEntry) (hash string, settled bool) {
		var pin model.ToolPin
		_ = json.Unmarshal(e.Value(), &pin)
		return pin.Hash, pin.Pending == nil
	}
	reviewed := map[string]bool{} // config ids
	bus.FollowKV(ctx, r.nc, r.assets.Pins, bus.KVHandler{
		Snapshot: func(entries map[string]jetstream.KeyValueEntry) {
			clear(reviewed)
			next := make(map[string]string, len(entries))
			for key, e := range entries {
				h, settled := hashOf(e)
				if old, ok := hashes[key]; ok && old != h && settled {
					reviewed[pinServerID(key)] = true
				}
				next[key] = h
			}
			hashes = next
			for id := range reviewed {
				r.pinsReviewed(ctx, id)
			}
		},
		Update: func(e jetstream.KeyValueEntry) {
			key := e.Key()
			if e.Operation() != jetstream.KeyValuePut {
				delete(hashes, key)
				return
			}
			h, settled := hashOf(e)
			old, ok := hashes[key]
			hashes[key] = h
			if ok && old != h && settled {
				r.pinsReviewed(ctx, pinServerID(key))
			}
		},
	}, bus.KVFollowOptions{Logger: r.log})
}

// pinServerID is the config id a pin key (model.PinKey) starts with.
func pinServerID(key string) string {
	id, _, _ := strings.Cut(key, ".")
	return id
}

// pinsReviewed has the server of config id, if it runs here, check its
// tools against their pins again; off the watch's goroutine, which must not
// wait for the server's.
func (r *Runner) pinsReviewed(ctx context.Context, id string) {
	r.mu.Lock()
	s := r.servers[r.byID[id]]
	r.mu.Unlock()
	if s == nil {
		return
	}
	go func() { _ = s.do(func() error { return s.recheckPins(ctx, false) }) }()
}

// withheldOf checks tools, a list the server just gave, against their pins
// and tells which are withheld (token → why). It runs before the list is
// taken: the tools and what is withheld of them change at once, or a new
// or changed tool could be called by name, unreviewed, while the pins are
// read (one read per tool).
func (s *server) withheldOf(ctx context.Context, tools map[string]*mcp.Tool) map[string]string {
	cfg := s.config()
	withheld := map[string]string{}
	if policy := cfg.PinPolicy(); policy != model.PinOff && cfg.ID != "" {
		reviewed := s.hasPins(ctx, cfg)
		listed := make(map[string]bool, len(tools))
		for token, t := range tools {
			if !cfg.Tools.Allows(t.Name) {
				continue
			}
			ct := catalogTool(s.r, s.slug, token, t)
			listed[model.PinKey(cfg.ID, ct.Tool)] = true
			if why := s.checkPin(ctx, cfg, policy, ct, reviewed); why != "" {
				withheld[token] = why
			}
		}
		// Only listed tools are looked up there: what a server renamed away
		// from would otherwise stay for the server's lifetime.
		s.accepted.Range(func(k, _ any) bool {
			if !listed[k.(string)] {
				s.accepted.Delete(k)
			}
			return true
		})
	}
	return withheld
}

// overBudget tells whether a pin write (and its event) is past the
// server's budget, logging the first refusal of a while.
func (s *server) overBudget(tool string) bool {
	if s.pinBudget.Allow() {
		return false
	}
	if s.pinBudgetWarned.CompareAndSwap(false, true) {
		s.log.Warn("the server changes its tools faster than mcpbus pins them: new and changed tools are left unpinned and withheld (under every pin policy) until its budget refills", "tool", tool, "per_day", s.pinBudget.Burst())
		time.AfterFunc(time.Hour, func() { s.pinBudgetWarned.Store(false) })
	}
	return true
}

// hasPins tells whether the server's tools were pinned before: then a tool
// that appears (a rename, an addition) is a change like any other. Pins that
// cannot be read count as present (the safe side under strict).
func (s *server) hasPins(ctx context.Context, cfg *model.McpConfig) bool {
	c, cancel := context.WithTimeout(ctx, s.r.publishTimeout())
	defer cancel()
	keys, err := s.r.assets.Pins.ListKeysFiltered(c, cfg.ID+".>")
	if err != nil {
		return true
	}
	defer func() { _ = keys.Stop() }()
	for range keys.Keys() {
		return true
	}
	return false
}

// checkPin pins t when it is the first sight of the server's tools, and
// tells why it is withheld ("" when it is not). The pins cannot be read
// (NATS away): a tool whose definition was accepted here before goes on; a
// strict server's other tools wait.
func (s *server) checkPin(ctx context.Context, cfg *model.McpConfig, policy string, t model.Tool, reviewed bool) string {
	for range 3 {
		why, raced := s.checkPinOnce(ctx, cfg, policy, t, reviewed)
		if !raced {
			return why
		}
	}
	return s.unreadPin(t)
}

// unreadPin is checkPin's answer for a tool whose pin kept changing under it.
func (s *server) unreadPin(t model.Tool) string {
	return fmt.Sprintf("tool %s of server %s cannot be checked against its pinned definition (its pin keeps changing); it is withheld until it can", t.Tool, s.slug)
}

// checkPinOnce is one try of checkPin; raced reports that the change it
// recorded lost to another replica's write of the same pin, and the tool is
// to be judged again by what that one wrote (a replica that recorded a tool
// as new while another pinned it at first sight withheld it for good).
func (s *server) checkPinOnce(ctx context.Context, cfg *model.McpConfig, policy string, t model.Tool, reviewed bool) (why string, raced bool) {
	def, hash, err := model.ToolDefinition(t)
	if err != nil {
		s.log.Warn("tool definition cannot be pinned", "tool", t.Tool, "error", err)
		return "", false
	}
	kv := s.r.assets.Pins
	key := model.PinKey(cfg.ID, t.Tool)
	c, cancel := context.WithTimeout(ctx, s.r.publishTimeout())
	defer cancel()
	entry, err := kv.Get(c, key)
	now := time.Now().UTC()
	var pin model.ToolPin
	var rev uint64 // 0: no entry yet
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) && !reviewed:
		if s.overBudget(t.Tool) {
			return s.unpinned(t.Tool), false
		}
		pin = model.ToolPin{Server: s.slug, Tool: t.Tool, Hash: hash, Definition: def, PinnedAt: now}
		if lostPinRace(s.writePin(c, key, pin, 0)) {
			s.settleFirstSight(c, key, pin)
		}
		s.accepted.Store(key, hash)
		return "", false
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// A tool new to a server whose tools were pinned: pinned from nothing.
		pin = model.ToolPin{Server: s.slug, Tool: t.Tool}
	case err != nil:
		if ok, _ := s.accepted.Load(key); ok == hash || policy != model.PinStrict {
			return "", false
		}
		return fmt.Sprintf("tool %s of server %s cannot be checked against its pinned definition (%v); it is withheld until it can", t.Tool, s.slug, err), false
	default:
		rev = entry.Revision()
		if err := json.Unmarshal(entry.Value(), &pin); err != nil {
			s.log.Warn("a tool pin is malformed: pinning afresh", "tool", t.Tool, "error", err)
			s.writePin(c, key, model.ToolPin{Server: s.slug, Tool: t.Tool, Hash: hash, Definition: def, PinnedAt: now}, rev)
			s.accepted.Store(key, hash)
			return "", false
		}
	}
	if !reviewed && pin.Hash == "" && pin.Pending != nil && pin.Pending.Hash == hash {
		// This start's first sight met another replica's record of the tool
		// as new since a review (see settleFirstSight): there was none.
		pin = model.ToolPin{Server: s.slug, Tool: t.Tool, Hash: hash, Definition: def, PinnedAt: now}
		_ = s.writePin(c, key, pin, rev)
		s.accepted.Store(key, hash)
		return "", false
	}
	if pin.Hash == hash {
		if pin.Pending != nil { // back to what was approved
			pin.Pending = nil
			s.writePin(c, key, pin, rev)
		}
		s.accepted.Store(key, hash)
		return "", false
	}
	fresh := pin.Pending == nil || pin.Pending.Hash != hash
	if fresh && s.overBudget(t.Tool) {
		return s.unpinned(t.Tool), false
	}
	old := pin
	if policy == model.PinWarn {
		pin.Server, pin.Tool, pin.Hash, pin.Definition, pin.PinnedAt, pin.Pending = s.slug, t.Tool, hash, def, now, nil
		s.writePin(c, key, pin, rev)
		s.accepted.Store(key, hash)
	} else if fresh {
		pin.Pending = &model.PinnedChange{Hash: hash, Definition: def, SeenAt: now}
		if lostPinRace(s.writePin(c, key, pin, rev)) {
			return "", true
		}
	}
	if fresh {
		s.publishToolChanged(ctx, model.ToolChangedEvent{Server: s.slug, Tool: t.Tool, Policy: policy,
			PinnedHash: old.Hash, NewHash: hash, Changed: model.ChangedFields(old.Definition, def),
			Withheld: policy == model.PinStrict, Pinned: old.Definition, Pending: def, At: now})
	}
	if policy == model.PinWarn {
		return "", false
	}
	if old.Hash == "" {
		return fmt.Sprintf("tool %s of server %s appeared after the server's tools were reviewed (a new or renamed tool) and is withheld until an operator approves it: mcpbus tools review %s",
			t.Tool, s.slug, s.slug), false
	}
	return fmt.Sprintf("tool %s of server %s changed since it was reviewed (%s) and is withheld until an operator approves it: mcpbus tools review %s",
		t.Tool, s.slug, joinFields(model.ChangedFields(old.Definition, def)), s.slug), false
}

// unpinned is checkPin's answer for a tool past the server's pin budget.
func (s *server) unpinned(tool string) string {
	return fmt.Sprintf("tool %s of server %s is new or changed, and the server changes its tools faster than mcpbus records them (at most %d a day): it is withheld until it can be recorded for review",
		tool, s.slug, s.pinBudget.Burst())
}

func joinFields(fields []string) string {
	out := ""
	for i, f := range fields {
		if i > 0 {
			out += ", "
		}
		out += f
	}
	return out
}

// writePin stores pin if the entry is still at rev, or still absent when rev
// is 0 (another runner of the same server may have written it since: its
// write stands, and the error is one lostPinRace tells).
func (s *server) writePin(ctx context.Context, key string, pin model.ToolPin, rev uint64) error {
	data, _ := json.Marshal(pin)
	var err error
	if rev == 0 {
		_, err = s.r.assets.Pins.Create(ctx, key, data)
	} else {
		_, err = s.r.assets.Pins.Update(ctx, key, data, rev)
	}
	if err != nil && !lostPinRace(err) {
		s.log.Warn("recording a tool pin failed", "tool", pin.Tool, "error", err)
	}
	return err
}

// lostPinRace reports whether a pin write failed because another writer
// got there first: a create meets ErrKeyExists; an update a revision
// mismatch (ErrKeyExists too on a single-replica bucket, but not on a
// replicated one, whose nats-server answers with another error code).
func lostPinRace(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// settleFirstSight handles a first pin (the server's tools never pinned
// when this start listed them) that another writer recorded first. Two
// replicas starting at once both list the tools: the later one finds the
// earlier one's first pins, counts the server as reviewed, and records each
// tool not yet pinned as new since the review (pending, pinned from
// nothing: withheld under strict, listed for review). There was no review:
// the tool, as this first sight has it, becomes the pin; the replica that
// withheld it checks again when it sees the pinned hash change (watchPins).
// Any other entry (the same pin, or another definition) stands. (A first
// sight that reads such a record rather than meeting it on its write
// settles it in checkPin.)
func (s *server) settleFirstSight(ctx context.Context, key string, pin model.ToolPin) {
	e, err := s.r.assets.Pins.Get(ctx, key)
	if err != nil {
		return
	}
	var cur model.ToolPin
	if json.Unmarshal(e.Value(), &cur) != nil || cur.Hash != "" || cur.Pending == nil || cur.Pending.Hash != pin.Hash {
		return
	}
	_ = s.writePin(ctx, key, pin, e.Revision())
}

func (s *server) publishToolChanged(ctx context.Context, ev model.ToolChangedEvent) {
	data, _ := json.Marshal(ev)
	c, cancel := context.WithTimeout(ctx, s.r.publishTimeout())
	defer cancel()
	s.r.opts.Audit.Append(s.r.subj.Event("tool_changed", s.slug), data)
	if _, err := s.r.js.Publish(c, s.r.subj.Event("tool_changed", s.slug), data); err != nil {
		s.log.Warn("publishing a tool_changed event failed", "tool", ev.Tool, "error", err)
	}
	s.log.Warn("a tool's definition changed since it was pinned", "tool", ev.Tool, "policy", ev.Policy, "changed", ev.Changed, "withheld", ev.Withheld)
}

// unreviewed tells whether t, as the server lists it now, differs from the
// definition last accepted under a strict policy: a server may change a
// tool silently (no list_changed), so a list passed through (rpc
// tools/list) leaves it out until the runner's own next list checks it.
func (s *server) unreviewed(cfg *model.McpConfig, t *mcp.Tool) bool {
	if cfg.ID == "" || cfg.PinPolicy() != model.PinStrict {
		return false
	}
	_, hash, err := model.ToolDefinition(catalogTool(s.r, s.slug, model.ToolToken(t.Name), t))
	if err != nil {
		return true
	}
	ok, _ := s.accepted.Load(model.PinKey(cfg.ID, t.Name))
	return ok != hash
}

// pinnedFields leaves of t (a tool a server listed, passed on by rpc
// tools/list) what its pin covers (model.ToolDefinition), as the catalog
// does: its icons (URLs a client fetches and shows) and _meta (which MCP
// extensions read, e.g. a UI resource to render) are not pinned, so a
// server could change them after its review; mcpbus serves neither.
func pinnedFields(t *mcp.Tool) { t.Icons, t.Meta = nil, nil }

// withheldLocked tells why the tool token names is withheld, or "". The
// caller holds s.mu.
func (s *server) withheldLocked(token string) string { return s.withheld[token] }

// handleToolsReview answers mcp.v1.tools.review: the pins with a pending
// definition, of one server (slug) or all, sorted by server and tool.
func (r *Runner) handleToolsReview(ctx context.Context, req micro.Request) (any, error) {
	var in model.ToolsReviewRequest
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	prefix := ""
	if in.Server != "" {
		cfg, err := r.configBySlug(ctx, in.Server)
		if err != nil {
			return nil, err
		}
		prefix = cfg.ID + "."
	}
	keys, err := r.assets.Pins.ListKeys(ctx)
	if err != nil {
		return nil, bus.JetStreamErr("listing tool pins", err)
	}
	out := model.ToolsReviewReply{Changes: []model.ToolPin{}}
	for key := range keys.Keys() {
		if prefix != "" && (len(key) <= len(prefix) || key[:len(prefix)] != prefix) {
			continue
		}
		e, err := r.assets.Pins.Get(ctx, key)
		if err != nil {
			continue // deleted meanwhile
		}
		var pin model.ToolPin
		if json.Unmarshal(e.Value(), &pin) == nil && pin.Pending != nil {
			out.Changes = append(out.Changes, pin)
		}
	}
	sort.Slice(out.Changes, func(i, j int) bool {
		a, b := out.Changes[i], out.Changes[j]
		return a.Server < b.Server || a.Server == b.Server && a.Tool < b.Tool
	})
	return out, nil
}

// handleToolsApprove answers mcp.v1.tools.approve: the pending definition
// named by its hash becomes the pin (or, rejected, is dropped: the tool
// stays withheld while the server offers it), and the server's owner checks
// its tools again at once.
func (r *Runner) handleToolsApprove(ctx context.Context, req micro.Request) (any, error) {
	var in model.ToolsApproveRequest
	if err := bus.Decode(req.Data(), &in); err != nil {
		return nil, err
	}
	who, err := principal.FromHeader(nats.Header(req.Headers()))
	if err != nil {
		return nil, err
	}
	switch {
	case in.Server == "":
		return nil, apierr.Invalid("server", "server is required")
	case in.Tool == "":
		return nil, apierr.Invalid("tool", "tool is required")
	case in.Hash == "":
		return nil, apierr.Invalid("hash", "hash of the pending definition is required (mcpbus tools review shows it)")
	}
	cfg, err := r.configBySlug(ctx, in.Server)
	if err != nil {
		return nil, err
	}
	key := model.PinKey(cfg.ID, in.Tool)
	e, err := r.assets.Pins.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, apierr.Newf(apierr.NotFound, "server %s has no pinned tool %q", cfg.Slug, in.Tool)
	}
	if err != nil {
		return nil, bus.JetStreamErr("reading a tool pin", err)
	}
	var pin model.ToolPin
	if err := json.Unmarshal(e.Value(), &pin); err != nil {
		return nil, apierr.Wrap(apierr.Internal, "the tool pin is malformed", err)
	}
	if pin.Pending == nil || pin.Pending.Hash != in.Hash {
		return nil, &apierr.Error{Code: apierr.Conflict, Field: "hash",
			Message: fmt.Sprintf("tool %s of server %s has no pending definition with that hash (review again: it may have changed)", in.Tool, cfg.Slug)}
	}
	ev := model.ToolReviewedEvent{Server: cfg.Slug, Tool: in.Tool, Decision: model.PinApproved, Principal: who.ID,
		PinnedHash: pin.Hash, NewHash: pin.Pending.Hash, At: time.Now().UTC()}
	if in.Reject {
		ev.Decision = model.PinRejected
		pin.Pending = nil
	} else {
		pin.Hash, pin.Definition, pin.PinnedAt, pin.Pending = pin.Pending.Hash, pin.Pending.Definition, time.Now().UTC(), nil
	}
	data, _ := json.Marshal(pin)
	if _, err := r.assets.Pins.Update(ctx, key, data, e.Revision()); err != nil {
		return nil, bus.JetStreamErr("recording the review", err)
	}
	r.publishToolReviewed(ctx, ev)
	// The owner checks its tools again (nobody owns it: the next start does).
	msg := nats.NewMsg(r.subj.Control(cfg.Slug))
	msg.Data, _ = json.Marshal(controlRequest{Verb: "pins"})
	if _, err := bus.Request(ctx, r.nc, msg, cfg.Runtime.StartTimeout.Or(r.opts.StartTimeout)); err != nil {
		r.log.Info("the server's owner did not check its tools again; its next start will", "server", cfg.Slug, "error", err)
	}
	return pin, nil
}

// publishToolReviewed announces a review on events.tool_reviewed.<server>
// and appends it to the runner's audit chain.
func (r *Runner) publishToolReviewed(ctx context.Context, ev model.ToolReviewedEvent) {
	data, _ := json.Marshal(ev)
	subject := r.subj.Event("tool_reviewed", ev.Server)
	r.opts.Audit.Append(subject, data)
	c, cancel := context.WithTimeout(ctx, r.publishTimeout())
	defer cancel()
	if _, err := r.js.Publish(c, subject, data); err != nil {
		r.log.Warn("publishing a tool_reviewed event failed", "server", ev.Server, "tool", ev.Tool, "error", err)
	}
	r.log.Info("a tool's pending definition was reviewed", "server", ev.Server, "tool", ev.Tool, "decision", ev.Decision, "by", ev.Principal)
}
