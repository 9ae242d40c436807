package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/oauth2"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
	"github.com/mcpbus/mcpbus/services/runner/internal/launch"
)

// Per-principal upstream sessions (issue 28 item 4). A remote server with
// auth.per_principal runs its shared session with the server's own
// credentials (the operator's), for its start, its tool list and the
// operator's calls; every other principal's calls and requests go on a
// session of that principal alone, opened with the principal's own record
// (kind principal: an OAuth token or static header secrets) on its first
// call and closed when idle, revoked, or the server stops. A principal
// without a record gets UNAUTHORIZED: no call ever carries another's
// credentials, and no session is shared between principals.

// PrincipalResolver resolves a principal's own credentials for a server;
// libs/credclient.Resolver implements it. A runner whose resolver does not
// answers per-principal servers' calls SERVICE_UNAVAILABLE.
type PrincipalResolver interface {
	ResolveFor(ctx context.Context, serverID, principal string) (model.ResolvedCredentials, error)
}

// maxPrincipalSessions bounds the sessions one server keeps open; past it
// the least recently used is closed.
const maxPrincipalSessions = 256

// principalSession is one principal's upstream session, or its connect
// under way (ready not yet closed).
type principalSession struct {
	ready   chan struct{}
	sess    liveSession
	err     error
	lastUse time.Time // under principalSessions.mu, as inUse
	inUse   int       // requests on it now: never closed as idle then
}

// principalSessions are a server's per-principal sessions, by principal id.
type principalSessions struct {
	mu   sync.Mutex
	byID map[string]*principalSession
}

// callerPrincipal is the principal a request acts for: the agent its subject
// names, else the one in its header, else "" (the operator).
func (r *Runner) callerPrincipal(c caller, h nats.Header) (string, error) {
	switch {
	case c.agent != "":
		return principal.KindAgent + ":" + c.agent, nil
	case h.Get(principal.Header) != "":
		return r.principalIDs.of(h.Get(principal.Header))
	}
	return "", nil
}

// principalIDs remembers the principal id of the Mcpbus-Principal header
// values seen. A call reads its principal two to four times (the event, the
// relay's bookkeeping, approvals, per-principal sessions) and the values
// repeat from call to call (the gateway sends one per key or token): a
// decode is a base64 and a JSON decode, ~7 objects. Only values that decode
// are kept, at most maxPrincipalIDs of at most maxPrincipalIDLen bytes; the
// map is emptied when full.
type principalIDs struct {
	mu  sync.RWMutex
	ids map[string]string
}

const (
	maxPrincipalIDs   = 256
	maxPrincipalIDLen = 2 << 10
)

// of is the principal id of header value v, as principal.Decode reads it.
func (p *principalIDs) of(v string) (string, error) {
	p.mu.RLock()
	id, ok := p.ids[v]
	p.mu.RUnlock()
	if ok {
		return id, nil
	}
	pr, err := principal.Decode(v)
	if err != nil {
		return "", err
	}
	if len(v) <= maxPrincipalIDLen {
		p.mu.Lock()
		if p.ids == nil || len(p.ids) >= maxPrincipalIDs {
			p.ids = make(map[string]string)
		}
		p.ids[v] = pr.ID
		p.mu.Unlock()
	}
	return pr.ID, nil
}

// sessionFor is the session a request goes on: shared, or for a
// per-principal server the caller's own (opened on first use); release
// ends the request's use of it.
func (s *server) sessionFor(ctx context.Context, c caller, h nats.Header, shared liveSession, cfg *model.McpConfig) (liveSession, func(), error) {
	if !cfg.Auth.PerPrincipal {
		return shared, noRelease, nil
	}
	who, err := s.r.callerPrincipal(c, h)
	if err != nil {
		return liveSession{}, noRelease, err
	}
	if who == "" || who == model.PrincipalOperator {
		return shared, noRelease, nil
	}
	// A session dropped while it connected (its principal's credentials
	// changed meanwhile) carried nothing upstream: the call opens another
	// with the current ones, while the server still runs (a stop drops
	// them too, and must not be followed by a new session).
	for tries := 1; ; tries++ {
		sess, release, err := s.principalSession(ctx, cfg, who)
		if !errors.Is(err, errSessionDropped) || tries == maxSessionTries || ctx.Err() != nil ||
			s.ctx.Err() != nil || s.status().State != model.StateRunning {
			return sess, release, err
		}
	}
}

// errSessionDropped marks the error of a principal's session taken from the
// map while it connected (principalSession).
var errSessionDropped = errors.New("principal session dropped while it connected")

// maxSessionTries bounds the connects of one call whose sessions keep being
// dropped (credentials changed again and again).
const maxSessionTries = 3

func noRelease() {}

// principalSession returns who's session, connecting it first if needed
// (one connect at a time per principal; others wait for it within ctx).
func (s *server) principalSession(ctx context.Context, cfg *model.McpConfig, who string) (liveSession, func(), error) {
	ps := &s.principals
	ps.mu.Lock()
	if ps.byID == nil {
		ps.byID = map[string]*principalSession{}
	}
	e, ok := ps.byID[who]
	if !ok {
		e = &principalSession{ready: make(chan struct{})}
		ps.byID[who] = e
		evicted := ps.evictLocked(s.idleTimeout(cfg))
		ps.mu.Unlock()
		s.closeAll(evicted)
		e.sess, e.err = s.connectPrincipal(ctx, cfg, who)
		ps.mu.Lock()
		if e.err != nil && ps.byID[who] == e {
			delete(ps.byID, who) // the next call tries again
		}
		// Taken from the map while it connected (takePrincipal: who's
		// credentials changed or were revoked, or the server stopped),
		// which closes only the sessions ready by then: this one is
		// closed here, and neither this call nor those waiting for it go
		// upstream with the credentials it was opened with.
		var dropped liveSession
		if e.err == nil && ps.byID[who] != e {
			dropped, e.sess = e.sess, liveSession{}
			e.err = apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("your session with %s was closed while it connected (your credentials changed or were revoked, or the server stopped); try again", s.slug), errSessionDropped)
		}
		close(e.ready)
		ps.mu.Unlock()
		if dropped.ClientSession != nil {
			go s.closeAll([]liveSession{dropped})
		}
		if e.err != nil {
			return liveSession{}, noRelease, e.err
		}
		go s.watchPrincipal(who, e)
		return ps.use(e)
	}
	ps.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		return liveSession{}, noRelease, apierr.Wrap(apierr.Network, "timed out waiting for the upstream session", ctx.Err())
	}
	if e.err != nil {
		return liveSession{}, noRelease, e.err
	}
	return ps.use(e)
}

// use marks one more request on e until the returned release.
func (ps *principalSessions) use(e *principalSession) (liveSession, func(), error) {
	ps.mu.Lock()
	e.inUse++
	e.lastUse = time.Now()
	ps.mu.Unlock()
	return e.sess, func() {
		ps.mu.Lock()
		e.inUse--
		e.lastUse = time.Now()
		ps.mu.Unlock()
	}, nil
}

// evictIdle closes the principal sessions unused for idle (0: never); the
// runner's tick calls it.
func (s *server) evictIdle(idle time.Duration) {
	ps := &s.principals
	ps.mu.Lock()
	evicted := ps.evictLocked(idle)
	ps.mu.Unlock()
	s.closeAll(evicted)
}

// evictLocked removes the sessions idle longer than idle (0: never), and the least
// recently used past maxPrincipalSessions; the caller closes them.
func (ps *principalSessions) evictLocked(idle time.Duration) []liveSession {
	var out []liveSession
	now := time.Now()
	for who, e := range ps.byID {
		if idle > 0 && isReady(e) && e.err == nil && e.inUse == 0 && now.Sub(e.lastUse) > idle {
			out = append(out, e.sess)
			delete(ps.byID, who)
		}
	}
	for len(ps.byID) > maxPrincipalSessions {
		oldest, at := "", now
		for who, e := range ps.byID {
			if isReady(e) && e.inUse == 0 && !e.lastUse.After(at) {
				oldest, at = who, e.lastUse
			}
		}
		if oldest == "" {
			break
		}
		if e := ps.byID[oldest]; e.err == nil {
			out = append(out, e.sess)
		}
		delete(ps.byID, oldest)
	}
	return out
}

func isReady(e *principalSession) bool {
	select {
	case <-e.ready:
		return true
	default:
		return false
	}
}

func (s *server) closeAll(sessions []liveSession) {
	var wg sync.WaitGroup
	for _, l := range sessions {
		if l.ClientSession != nil {
			wg.Go(func() { s.closeRemote(l.ClientSession, l.raw) }) // bounded, as the shared session's
		}
	}
	wg.Wait()
}

// forget closes who's session ("" every principal's): its record changed
// or was revoked, or the server stops.
func (s *server) forgetPrincipal(who string) int {
	out := s.takePrincipal(who)
	s.closeAll(out)
	return len(out)
}

// takePrincipal drops who's session ("" every principal's) from the map and
// returns the live ones, for the caller to close.
func (s *server) takePrincipal(who string) []liveSession {
	return s.takePrincipals(func(id string) bool { return who == "" || id == who })
}

// takePrincipals is takePrincipal of every principal match accepts.
func (s *server) takePrincipals(match func(who string) bool) []liveSession {
	ps := &s.principals
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []liveSession
	for id, e := range ps.byID {
		if !match(id) {
			continue
		}
		if isReady(e) && e.err == nil {
			out = append(out, e.sess)
		}
		delete(ps.byID, id)
	}
	return out
}

// watchPrincipal drops who's entry when its session ends on its own (the
// upstream closed it, or it refused the credentials on a refresh).
func (s *server) watchPrincipal(who string, e *principalSession) {
	_ = e.sess.Wait()
	// A session that ended on its own (the remote server forgot it) still
	// holds go-sdk's goroutines until Close; off this goroutine, so that a
	// slow DELETE to the remote server delays nothing.
	go func() { _ = e.sess.Close() }()
	s.relays.end(e.sess.ClientSession)
	s.principals.mu.Lock()
	if s.principals.byID[who] == e {
		delete(s.principals.byID, who)
	}
	s.principals.mu.Unlock()
}

// connectPrincipal opens who's session: the config's plain headers plus the
// principal's own secret headers, and its OAuth token (refreshed through the
// credential service for that principal alone); never the server's.
func (s *server) connectPrincipal(ctx context.Context, cfg *model.McpConfig, who string) (liveSession, error) {
	res, ok := s.r.opts.Resolver.(PrincipalResolver)
	if !ok || s.r.opts.Resolver == nil {
		return liveSession{}, apierr.Newf(apierr.ServiceUnavailable, "server %s takes each caller's own credentials and this runner cannot resolve them", s.slug)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Runtime.StartTimeout.Or(s.r.opts.StartTimeout))
	defer cancel()
	creds, err := res.ResolveFor(ctx, cfg.ID, who)
	if err != nil {
		if e := refusedCredentials(err); e != nil {
			return liveSession{}, e
		}
		return liveSession{}, err
	}
	if len(creds.Headers) == 0 && (creds.OAuth == nil || creds.OAuth.AccessToken == "") {
		return liveSession{}, notAuthorized(cfg.Slug)
	}
	if s.tokenForURL(cfg, creds.OAuth) != nil {
		// Authorized for the server's former URL: as good as none here
		// (the gateway offers the caller a new authorization).
		return liveSession{}, notAuthorized(cfg.Slug)
	}
	c := *cfg
	c.Transport.Headers = mergeMaps(cfg.Transport.Headers, creds.Headers)
	secrets := newPrincipalSecrets(principalValues(creds))
	var up upstreamAuth
	if o := creds.OAuth; o != nil && o.AccessToken != "" {
		src := credTokenSource{r: s.r, id: cfg.ID, principal: who, timeout: s.r.opts.StartTimeout, fetched: secrets.add}
		up = upstreamAuth{ts: oauth2.ReuseTokenSourceWithExpiry(oauthToken(o), src, s.r.opts.OAuthEarlyRefresh)}
		c.Transport.Headers = withoutHeader(c.Transport.Headers, model.OAuthHeader)
	}
	lopts := s.r.opts.Launch
	lopts.Auth = up
	l, err := launch.Prepare(ctx, &c, nil, lopts)
	if err != nil {
		return liveSession{}, err
	}
	sess, err := s.client.Connect(ctx, tracedTransport{l.Transport}, nil)
	if err != nil {
		if e := refusedCredentials(err); e != nil {
			return liveSession{}, e
		}
		if e := refusedAddress(err); e != nil {
			return liveSession{}, e
		}
		return liveSession{}, s.scrubError(apierr.Wrap(apierr.Network, fmt.Sprintf("could not connect to %s with your credentials: %s", cfg.Slug, s.serverText(secrets.redactor().Redact(err.Error()))), err), secrets.redactor())
	}
	return liveSession{ClientSession: sess, raw: l.Connected(sess), secrets: secrets}, nil
}

// notAuthorized is the answer to a caller without their own credentials.
func notAuthorized(slug string) *apierr.Error {
	return apierr.Newf(apierr.Unauthorized, "%s%s: it takes each caller's own credentials. Authorize it as yourself: POST /api/v1/me/authorizations/%s with your key (OAuth; PUT there stores header secrets), or the console's Authorizations page; an operator: `mcpbus servers auth %s --principal <you>`",
		model.MsgNotAuthorized, slug, slug, slug)
}

// withoutHeader returns h without name (case-insensitively).
func withoutHeader(h map[string]string, name string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		if !strings.EqualFold(k, name) {
			out[k] = v
		}
	}
	return out
}

// principalSecrets are the secret values of a principal's own session:
// their headers and OAuth token, to which each token a refresh brings is
// added (the last maxRefreshed of them: an older one has expired).
type principalSecrets struct {
	mu        sync.Mutex
	base      []string
	refreshed []string
	red       launch.Redactor
}

// maxRefreshed bounds the refreshed tokens a session's redactor keeps.
const maxRefreshed = 8

func newPrincipalSecrets(values []string) *principalSecrets {
	return &principalSecrets{base: values, red: launch.NewRedactor(values)}
}

// add keeps a token the session's token source fetched.
func (p *principalSecrets) add(token string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.Contains(p.base, token) || slices.Contains(p.refreshed, token) {
		return
	}
	if len(p.refreshed) == maxRefreshed {
		p.refreshed = p.refreshed[1:]
	}
	p.refreshed = append(p.refreshed, token)
	p.red = launch.NewRedactor(append(slices.Clone(p.base), p.refreshed...))
}

// redactor hides the session's values (none for a session of the server's own).
func (p *principalSecrets) redactor() launch.Redactor {
	if p == nil {
		return launch.Redactor{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.red
}

// principalValues are the secret values of a principal's own session: what
// its server's errors must not quote back (to the event's readers, the
// logs, the spans).
func principalValues(c model.ResolvedCredentials) []string {
	var out []string
	for _, v := range c.Headers {
		out = append(out, v)
		if _, token, ok := strings.Cut(v, " "); ok {
			out = append(out, strings.TrimSpace(token))
		}
	}
	if c.OAuth != nil {
		out = append(out, c.OAuth.AccessToken)
	}
	return out
}

// followPrincipalCreds closes a principal's sessions on this runner's
// replicas when their own record is set or deleted (events.cred.<id>, which
// every runner hears) until ctx ends. The runtime.forget a writer sends
// after such a change reaches one replica only (the control subject is the
// replicas' queue group): the others went on calling upstream with the
// credentials replaced or revoked. A refresh (the credential service's own,
// of an OAuth token) closes nothing: the record's grant is the same.
func (r *Runner) followPrincipalCreds(ctx context.Context) {
	sub, err := r.nc.Subscribe(r.subj.Event("cred", "*"), func(m *nats.Msg) {
		var ev model.CredEvent
		if json.Unmarshal(m.Data, &ev) != nil || ev.Type != model.CredChanged || (ev.Via != credVerbSet && ev.Via != credVerbDelete) {
			return
		}
		// Off the subscription's goroutine: closing a session waits for
		// its upstream.
		go r.forgetPrincipalRecord(ev.ServerID)
	})
	if err != nil {
		r.log.Warn("not following principals' credential changes: a change closes their sessions on the replica runtime.forget reaches only", "error", err)
		return
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
}

// The verbs of the credential service (CredEvent.Via) that replace or
// remove a record.
const (
	credVerbSet    = "set"
	credVerbDelete = "delete"
)

// forgetPrincipalRecord closes the session of the principal whose own record
// of a per-principal server here has the id (model.PrincipalCredentialID).
func (r *Runner) forgetPrincipalRecord(id string) {
	r.mu.Lock()
	servers := slices.Collect(maps.Values(r.servers))
	r.mu.Unlock()
	for _, s := range servers {
		cfg := s.config()
		if cfg == nil || !cfg.Auth.PerPrincipal {
			continue
		}
		s.principals.mu.Lock()
		var who []string
		for p := range s.principals.byID {
			if model.PrincipalCredentialID(cfg.ID, p) == id {
				who = append(who, p)
			}
		}
		s.principals.mu.Unlock()
		for _, p := range who {
			if n := s.forgetPrincipal(p); n > 0 {
				s.log.Info("a principal's own credentials changed: their session is closed", "principal", p)
			}
		}
	}
}
