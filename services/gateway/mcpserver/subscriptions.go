package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Resource subscriptions and a server's own list changes (the runner's
// side: services/runner/runner/resourcesubs.go). go-sdk keeps which session
// subscribed to which URI and sends notifications/resources/updated to
// those sessions, in both eras (a session's resources/subscribe, the
// resourceSubscriptions of a 2026-07-28 subscriptions/listen). The gateway
// checks that the URI is a resource its principal may read, asks the
// server's runner to subscribe (rpc resources/subscribe), asks again every
// third of the lease while a session of this instance holds the
// subscription, and passes each events.resource_updated.<server> on to the
// views holding the URI. events.list_changed.<server> tells every view
// that may reach the server that its prompts or resources changed.

// viewSubs are the resources a view's sessions subscribed to, by the
// gateway's own form of the URI (resourceURI): a client may write it
// escaped otherwise, and go-sdk notifies the sessions of the exact URI each
// subscribed with, which is kept (every spelling a session used: go-sdk
// holds each apart, and an unsubscribe ends one of them).
type viewSubs struct {
	mu    sync.Mutex
	byURI map[string]map[*mcp.ServerSession]map[string]bool // the gateway's URI → session → the URIs it subscribed with
}

// maxViewSubs bounds the resources one view (a principal) holds
// subscribed: a server's runner leases at most
// model.MaxResourceSubscriptions for everyone, so one key may take a
// quarter of them.
const maxViewSubs = model.MaxResourceSubscriptions / 4

// take records that ss subscribed to uri as asked, unless the view holds
// maxViewSubs resources already, uri not among them (ok false). It is
// recorded before the runner is asked, so subscriptions sent at once are
// counted against each other; added says whether the record is new, to
// undo if the runner refuses.
func (s *viewSubs) take(uri string, ss *mcp.ServerSession, asked string) (added, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sessions, held := s.byURI[uri]
	if !held && len(s.byURI) >= maxViewSubs {
		return false, false
	}
	if s.byURI == nil {
		s.byURI = map[string]map[*mcp.ServerSession]map[string]bool{}
	}
	if sessions == nil {
		sessions = map[*mcp.ServerSession]map[string]bool{}
		s.byURI[uri] = sessions
	}
	if sessions[ss] == nil {
		sessions[ss] = map[string]bool{}
	}
	if sessions[ss][asked] {
		return false, true
	}
	sessions[ss][asked] = true
	return true, true
}

// remove forgets that ss subscribed to uri as asked.
func (s *viewSubs) remove(uri string, ss *mcp.ServerSession, asked string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byURI[uri][ss], asked)
	if len(s.byURI[uri][ss]) == 0 {
		delete(s.byURI[uri], ss)
	}
	if len(s.byURI[uri]) == 0 {
		delete(s.byURI, uri)
	}
}

// asked are the URIs the sessions holding uri subscribed with.
func (s *viewSubs) asked(uri string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, forms := range s.byURI[uri] {
		for a := range forms {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// live drops the sessions no longer connected (a session that ends says no
// unsubscribe) and returns the URIs still held.
func (s *viewSubs) live(connected map[*mcp.ServerSession]bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uri, sessions := range s.byURI {
		maps.DeleteFunc(sessions, func(ss *mcp.ServerSession, _ map[string]bool) bool { return !connected[ss] })
		if len(sessions) == 0 {
			delete(s.byURI, uri)
		}
	}
	return slices.Collect(maps.Keys(s.byURI))
}

// subscribe is v's SubscribeHandler: the URI must be a resource v may read.
func (a *Aggregator) subscribe(ctx context.Context, v *view, req *mcp.SubscribeRequest) error {
	server, original, ok := parseURI(req.Params.URI)
	if !ok || !a.reachable(v, server) {
		return mcp.ResourceNotFoundError(req.Params.URI)
	}
	uri := resourceURI(server, original)
	added, ok := v.subs.take(uri, req.Session, req.Params.URI)
	if !ok {
		return rpcError(jsonrpc.CodeInvalidParams, apierr.Newf(apierr.RateLimited,
			"this key holds %d resource subscriptions, the most it may: unsubscribe from one first", maxViewSubs).WithField("uri"))
	}
	if err := a.subscribeUpstream(ctx, server, original); err != nil {
		if added {
			v.subs.remove(uri, req.Session, req.Params.URI)
		}
		return err
	}
	return nil
}

// unsubscribe is v's UnsubscribeHandler (go-sdk also calls it when a
// 2026-07-28 subscriptions/listen ends). The runner's subscription lapses
// with its lease, which no one renews once no session holds it.
func (a *Aggregator) unsubscribe(_ context.Context, v *view, req *mcp.UnsubscribeRequest) error {
	if server, original, ok := parseURI(req.Params.URI); ok {
		v.subs.remove(resourceURI(server, original), req.Session, req.Params.URI)
	}
	return nil
}

// subscribeUpstream takes or renews the runner's lease of the server's
// resource.
func (a *Aggregator) subscribeUpstream(ctx context.Context, server, original string) error {
	ctx, cancel := context.WithTimeout(ctx, a.opts.RPCTimeout)
	defer cancel()
	if err := a.client.RPC(ctx, server, "resources/subscribe", &mcp.SubscribeParams{URI: original}, nil); err != nil {
		return a.rpcFailure(ctx, "resources/subscribe", server, err)
	}
	return nil
}

// renewals are the servers whose leases are being renewed, and those to
// renew at once: a runner that takes a server over holds none of its
// subscriptions, and the sessions would hear nothing of it until the next
// renewal, up to a third of the lease later.
type renewals struct {
	mu      sync.Mutex
	busy    map[string]bool   // a renewal of the server is under way
	runners map[string]string // server → the runner its status last named
	running map[string]bool   // the server's status last said running
	pending map[string]bool   // servers to renew at once
	kick    chan struct{}     // something is pending (capacity 1)
}

// noteStatus compares a state of KV mcp_status with the last: a server
// that now runs, or that another runner now holds (idle: taken over
// lazily), is renewed at once. The runner is not compared for a server
// with replicas, whose runners take turns writing its status.
func (r *renewals) noteStatus(status map[string]model.Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	runners, running := make(map[string]string, len(status)), make(map[string]bool, len(status))
	for slug, st := range status {
		runners[slug], running[slug] = st.Runner, st.State == model.StateRunning
		moved := st.ReplicasWanted <= 1 && r.runners[slug] != "" && st.Runner != r.runners[slug] &&
			(st.State == model.StateRunning || st.State == model.StateIdle)
		if running[slug] && !r.running[slug] || moved {
			if r.pending == nil {
				r.pending = map[string]bool{}
			}
			r.pending[slug] = true
		}
	}
	r.runners, r.running = runners, running
	if len(r.pending) > 0 {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// takePending returns the servers to renew at once and forgets them.
func (r *renewals) takePending() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending
	r.pending = nil
	return p
}

// begin marks a renewal of server as under way, unless one is.
func (r *renewals) begin(server string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy[server] {
		return false
	}
	if r.busy == nil {
		r.busy = map[string]bool{}
	}
	r.busy[server] = true
	return true
}

func (r *renewals) end(server string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.busy, server)
}

// renewSubscriptions renews the leases of the resources this instance's
// sessions hold, every third of the lease, and those of a server at once
// when it runs again or moves to another runner.
func (a *Aggregator) renewSubscriptions(ctx context.Context) {
	t := time.NewTicker(model.ResourceSubscriptionLease / 3)
	defer t.Stop()
	for {
		var only map[string]bool
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.renew.kick:
			if only = a.renew.takePending(); len(only) == 0 {
				continue
			}
		}
		a.renewHeld(ctx, only)
	}
}

// renewHeld renews the leases of the resources a connected session holds,
// of the servers its principal still reaches (of those in only, unless it
// is nil), and returns their URIs and a wait for the renewals to end.
// Each server is renewed on its own goroutine, one at a time: a server
// slow to answer delays only its own renewals, not those of every other
// server past their lease, and is skipped until its last one ends.
func (a *Aggregator) renewHeld(ctx context.Context, only map[string]bool) (uris []string, wait func()) {
	held := map[string]bool{}
	byServer := map[string][]string{}
	for _, v := range a.allViews() {
		connected := map[*mcp.ServerSession]bool{}
		for ss := range v.server.Sessions() {
			connected[ss] = true
		}
		for _, uri := range v.subs.live(connected) {
			server, original, ok := parseURI(uri)
			if !ok || held[uri] || only != nil && !only[server] || !a.reachable(v, server) {
				continue
			}
			held[uri] = true
			byServer[server] = append(byServer[server], original)
		}
	}
	var wg sync.WaitGroup
	for server, originals := range byServer {
		if !a.renew.begin(server) {
			continue
		}
		wg.Add(1)
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer wg.Done()
			defer a.renew.end(server)
			a.renewServer(ctx, server, originals)
		}()
	}
	return slices.Sorted(maps.Keys(held)), wg.Wait
}

// renewServer renews the leases of one server's resources. A renewal that
// times out ends the round for the server: the rest would wait as long.
func (a *Aggregator) renewServer(ctx context.Context, server string, originals []string) {
	for _, original := range originals {
		rctx, cancel := context.WithTimeout(ctx, a.opts.RPCTimeout)
		err := a.client.RPC(rctx, server, "resources/subscribe", &mcp.SubscribeParams{URI: original}, nil)
		timedOut := errors.Is(rctx.Err(), context.DeadlineExceeded)
		cancel()
		if err == nil || ctx.Err() != nil {
			continue
		}
		a.log.Warn("renewing a resource subscription failed", "server", server, "error", err)
		if timedOut {
			return
		}
	}
}

// allViews are the views, copied out of a.mu.
func (a *Aggregator) allViews() []*view {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Collect(maps.Values(a.views))
}

// followNotices passes the runners' resource_updated and list_changed
// events on to the views' sessions.
func (a *Aggregator) followNotices(subj bus.Subjects) ([]*nats.Subscription, error) {
	updated, err := a.nc.Subscribe(subj.EventsOf("resource_updated"), func(m *nats.Msg) {
		var ev model.ResourceUpdatedEvent
		if json.Unmarshal(m.Data, &ev) != nil || !model.ValidSlug(ev.Server) || ev.URI == "" {
			return
		}
		uri := resourceURI(ev.Server, ev.URI)
		for _, v := range a.allViews() {
			asked := v.subs.asked(uri)
			if len(asked) == 0 || !a.reachable(v, ev.Server) {
				continue
			}
			v.updates.send(v.server, asked)
		}
	})
	if err != nil {
		return nil, err
	}
	changed, err := a.nc.Subscribe(subj.EventsOf("list_changed"), func(m *nats.Msg) {
		var ev model.ListChangedEvent
		if json.Unmarshal(m.Data, &ev) != nil || !model.ValidSlug(ev.Server) {
			return
		}
		prompts, resources := ev.List == model.ListPrompts, ev.List == model.ListResources
		if !prompts && !resources {
			return
		}
		for _, v := range a.allViews() {
			if a.reachable(v, ev.Server) {
				announceListChanged(v.server, prompts, resources)
			}
		}
	})
	if err != nil {
		_ = updated.Unsubscribe()
		return nil, err
	}
	return []*nats.Subscription{updated, changed}, nil
}

// viewUpdates passes a view's resource updates on from its own goroutine
// (relay): go-sdk writes them to each session's stream in turn, and a
// session that reads slowly (or not at all, until the write times out) then
// holds up only its own key's updates, not the callback every view's share.
// Updates waiting are a set of URIs: an update says "read it again", so two
// of one URI are worth one, and the set holds at most what the view
// subscribed to.
type viewUpdates struct {
	mu      sync.Mutex
	pending map[string]bool
	relay   relay
}

// send queues uris (the forms sessions subscribed with) for s's sessions.
func (u *viewUpdates) send(s *mcp.Server, uris []string) {
	u.mu.Lock()
	if u.pending == nil {
		u.pending = map[string]bool{}
	}
	for _, uri := range uris {
		u.pending[uri] = true
	}
	u.mu.Unlock()
	u.relay.kick(func() { u.deliver(s) })
}

// deliver sends what is pending.
func (u *viewUpdates) deliver(s *mcp.Server) {
	u.mu.Lock()
	batch := u.pending
	u.pending = nil
	u.mu.Unlock()
	for _, uri := range slices.Sorted(maps.Keys(batch)) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
		cancel()
	}
}
