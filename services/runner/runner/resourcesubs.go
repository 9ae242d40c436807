package runner

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/internal/launch"
)

// A server's own notifications for the gateway's clients. A client that
// subscribes to a resource makes the gateway ask the server's runner on
// rpc resources/subscribe, and again every third of
// model.ResourceSubscriptionLease while it holds the subscription. The
// runner subscribes its server's session once per resource, keeps the
// subscription while a lease is live (any gateway instance's), subscribes
// again on a new session (a restart), counts a live lease as use (a
// subscribed server does not go idle), and publishes the server's
// notifications/resources/updated for leased resources on
// events.resource_updated.<server>. No unsubscribe crosses the bus:
// several instances may hold one resource, so a lease nobody renews
// lapses, and the server's subscription is dropped at its next update or
// the next subscribe. Its notifications/prompts/list_changed and
// resources/list_changed go out on events.list_changed.<server>. Each
// replica of a server keeps its own leases: the rpc's queue group hands
// each renewal to one of them.
//
// Each is coalesced to one event a second (per resource, per list): a
// server may send notifications without end, and every event is stored in
// the event stream.

// noticeEvery is the least time between two events of one resource or list.
const noticeEvery = time.Second

// resourceSubs are a server's leased resource subscriptions.
type resourceSubs struct {
	mu    sync.Mutex
	byURI map[string]*resourceSub
}

type resourceSub struct {
	until time.Time          // the lease's end
	on    *mcp.ClientSession // the session subscribed (nil: none yet)
	sent  coalescer          // its updated events
}

// listNotices coalesce the list_changed events of a server.
type listNotices struct {
	prompts, resources coalescer
}

// subscribe serves rpc resources/subscribe: it takes or renews the lease
// of the resource and subscribes the server's session to it if that
// session has not been.
func (s *server) subscribe(ctx context.Context, c caller, h nats.Header, raw json.RawMessage) (any, error) {
	if c.agent != "" {
		return nil, apierr.Newf(apierr.Unauthorized, "agent %s may not subscribe to resources: resource updates go to the gateway's clients", c.agent).WithField("method")
	}
	var p mcp.SubscribeParams
	if len(raw) > 0 && json.Unmarshal(raw, &p) != nil {
		return nil, apierr.Invalid("params", "params must be {\"uri\": \"…\"}")
	}
	if p.URI == "" {
		return nil, apierr.Invalid("params.uri", "uri is required")
	}
	if len(p.URI) > maxResourceURI {
		return nil, apierr.Invalid("params.uri", "uri is longer than 4096 bytes")
	}
	sess, _, cfg, err := s.liveOrStart(ctx, h, "")
	if err != nil {
		return nil, err
	}
	if cfg.Auth.PerPrincipal {
		return nil, apierr.Newf(apierr.Validation, "server %s runs a session per principal: resource subscriptions are not offered for it", s.slug).WithField("method")
	}
	if ir := sess.InitializeResult(); ir == nil || ir.Capabilities == nil || ir.Capabilities.Resources == nil || !ir.Capabilities.Resources.Subscribe {
		return nil, apierr.Newf(apierr.Validation, "server %s does not offer resource subscriptions", s.slug).WithField("method")
	}
	now := time.Now()
	s.lastUse.Store(now.UnixNano())
	subs := &s.subs
	subs.mu.Lock()
	lapsed := subs.lapsedLocked(now)
	e := subs.byURI[p.URI]
	if e == nil {
		if len(subs.byURI) >= model.MaxResourceSubscriptions {
			subs.mu.Unlock()
			s.dropUpstream(lapsed)
			return nil, apierr.Newf(apierr.RateLimited, "server %s has %d resources subscribed, the most it may", s.slug, model.MaxResourceSubscriptions).WithField("params.uri")
		}
		e = &resourceSub{}
		if subs.byURI == nil {
			subs.byURI = map[string]*resourceSub{}
		}
		subs.byURI[p.URI] = e
	}
	e.until = now.Add(model.ResourceSubscriptionLease)
	needed := e.on != sess.ClientSession
	subs.mu.Unlock()
	s.dropUpstream(lapsed)
	if !needed {
		return struct{}{}, nil
	}
	if err := sess.Subscribe(ctx, &mcp.SubscribeParams{URI: p.URI}); err != nil {
		subs.mu.Lock()
		if e.on == nil && subs.byURI[p.URI] == e {
			delete(subs.byURI, p.URI)
		}
		subs.mu.Unlock()
		return nil, err
	}
	subs.mu.Lock()
	e.on = sess.ClientSession
	subs.mu.Unlock()
	return struct{}{}, nil
}

// leased reports whether a lease of the server's resources is live: a
// subscribed server does not go idle between the renewals (a minute
// apart, where an idle timeout may be shorter), whose calls alone counted.
func (subs *resourceSubs) leased(now time.Time) bool {
	subs.mu.Lock()
	defer subs.mu.Unlock()
	for _, e := range subs.byURI {
		if now.Before(e.until) {
			return true
		}
	}
	return false
}

// maxResourceURI bounds a subscribed URI: it is kept and published.
const maxResourceURI = 4096

// lapsedLocked removes the subscriptions whose lease ended and returns
// them by URI (with the session subscribed); subs.mu is held.
func (subs *resourceSubs) lapsedLocked(now time.Time) map[string]*mcp.ClientSession {
	var out map[string]*mcp.ClientSession
	for uri, e := range subs.byURI {
		if now.After(e.until) {
			delete(subs.byURI, uri)
			if e.on != nil {
				if out == nil {
					out = map[string]*mcp.ClientSession{}
				}
				out[uri] = e.on
			}
		}
	}
	return out
}

// dropUpstream unsubscribes the sessions of lapsed subscriptions, in the
// background (a server that does not answer holds nothing).
func (s *server) dropUpstream(lapsed map[string]*mcp.ClientSession) {
	if len(lapsed) == 0 {
		return
	}
	go func() {
		for uri, sess := range lapsed {
			ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
			_ = sess.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri})
			cancel()
		}
	}()
}

// resubscribe subscribes a new session of the server (after a restart) to
// every resource whose lease is live.
func (s *server) resubscribe(sess *mcp.ClientSession) {
	subs := &s.subs
	subs.mu.Lock()
	lapsed := subs.lapsedLocked(time.Now())
	var uris []string
	for uri := range subs.byURI {
		uris = append(uris, uri)
	}
	subs.mu.Unlock()
	s.dropUpstream(lapsed)
	for _, uri := range uris {
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		err := sess.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
		cancel()
		if err != nil {
			s.log.Warn("subscribing the restarted server to a resource failed", "error", s.serverText(err.Error())) // it may quote the server
			continue
		}
		subs.mu.Lock()
		if e := subs.byURI[uri]; e != nil {
			e.on = sess
		}
		subs.mu.Unlock()
	}
}

// onResourceUpdated publishes a server's notifications/resources/updated
// of its current session for a resource leased; others are not the
// gateway's.
func (s *server) onResourceUpdated(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
	if req.Params == nil {
		return
	}
	uri := req.Params.URI
	subs := &s.subs
	// The server's session now, not the one the entry last subscribed:
	// a subscribe that began on the session before a restart may record
	// it after resubscribe recorded the new one, and the new session's
	// updates were dropped until the next renewal subscribed it again.
	s.mu.RLock()
	current := s.sess
	s.mu.RUnlock()
	if current == nil || req.Session != current {
		return
	}
	subs.mu.Lock()
	e := subs.byURI[uri]
	if e == nil {
		subs.mu.Unlock()
		return
	}
	if time.Now().After(e.until) {
		lapsed := subs.lapsedLocked(time.Now())
		subs.mu.Unlock()
		s.dropUpstream(lapsed)
		return
	}
	subs.mu.Unlock()
	e.sent.notify(noticeEvery, func() {
		e.sent.started()
		s.publishNotice("resource_updated", model.ResourceUpdatedEvent{Server: s.slug, URI: uri, At: time.Now().UTC()})
	})
}

// onListChanged publishes a server's prompts or resources list change.
func (s *server) onListChanged(list string) {
	c := &s.lists.prompts
	if list == model.ListResources {
		c = &s.lists.resources
	}
	c.notify(noticeEvery, func() {
		c.started()
		s.publishNotice("list_changed", model.ListChangedEvent{Server: s.slug, List: list, At: time.Now().UTC()})
	})
}

// publishNotice publishes one notification event into the event stream
// (a core publish: the stream stores it, nothing waits for its ack).
func (s *server) publishNotice(kind string, ev any) {
	if s.lost.Load() {
		return // another runner may own the server now
	}
	data, _ := json.Marshal(ev)
	if err := s.r.nc.Publish(s.r.subj.Event(kind, s.slug), data); err != nil {
		s.log.Warn("publishing a "+kind+" event failed", "error", err)
	}
}

// subscribeRPC is subscribe with the rpc's error handling: a server's own
// failure is said as the other rpc methods say it, its secrets redacted.
func (s *server) subscribeRPC(ctx context.Context, c caller, h nats.Header, raw json.RawMessage) (any, error) {
	timeout := s.r.opts.CallTimeout
	if ct := bus.CallerTimeout(h); ct > 0 && ct < timeout {
		timeout = ct
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := s.subscribe(ctx, c, h, raw)
	if err != nil {
		if _, ok := err.(*apierr.Error); !ok {
			err = s.scrubError(rpcError(ctx, s.slug, "resources/subscribe", timeout, err), launch.Redactor{})
		}
		return nil, err
	}
	return rpcReply(out)
}
