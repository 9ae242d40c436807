package oauthflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// A server's public OAuth client is registered dynamically (RFC 7591) once
// per server and authorization server (issuer) — and callback — and kept in the credential
// service (the server's OAuth client record, model.OAuthRegisteredClientName):
// every later flow of the server, whoever starts it, reuses it. go-sdk's
// handler registers a client at each flow, so a key allowed to start its
// own flow could otherwise make the gateway flood a third party's
// authorization server with registrations, and each user would end with a
// client of their own.
//
// go-sdk has no hook for registration: the flow's HTTP client carries a
// registrar, which answers go-sdk's registration request itself with the
// kept client, or passes it on and keeps what the authorization server
// answered. To know which authorization server it talks to (the record
// holds the issuer it was registered at), the flow first discovers it as
// go-sdk does (discover); go-sdk then discovers again, from the same
// documents.

// maxRegistrationBytes bounds a registration response read (go-sdk reads
// at most as much).
const maxRegistrationBytes = 1 << 20

// registrar is the RoundTripper of a dynamically registering flow's client.
type registrar struct {
	f      *Flows
	cfg    *model.McpConfig
	fl     *flow
	next   http.RoundTripper
	hc     *http.Client  // the flow's client without the registrar, for discover
	target *registration // set by discover, before go-sdk's first request
}

// registration is where the flow's client registers: the authorization
// server's issuer and registration endpoint.
type registration struct {
	issuer   string
	endpoint string
}

func (r *registrar) RoundTrip(req *http.Request) (*http.Response, error) {
	t := r.target
	if t == nil || t.endpoint == "" || req.Method != http.MethodPost || !sameURL(req.URL, t.endpoint) {
		return r.next.RoundTrip(req)
	}
	return r.f.register(req, r.cfg, r.fl, t.issuer, r.next)
}

// sameURL reports whether u is the URL raw.
func sameURL(u *url.URL, raw string) bool {
	v, err := url.Parse(raw)
	return err == nil && u.Scheme == v.Scheme && strings.EqualFold(u.Host, v.Host) && u.Path == v.Path && u.RawQuery == v.RawQuery
}

// discover finds the authorization server of the protected resource at
// req's URL from its 401 (resp's challenge) as go-sdk's handler does: the
// protected resource metadata (the challenge's, then the well-known URLs),
// else the server's root as its own authorization server (2025-03-26);
// then that server's metadata, else its default endpoints.
func discover(ctx context.Context, hc *http.Client, req *http.Request, resp *http.Response) (*registration, error) {
	challenges, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return nil, fmt.Errorf("failed to parse WWW-Authenticate header: %w", err)
	}
	resource := req.URL.String()
	var candidates [][2]string // metadata URL, resource
	for _, c := range challenges {
		if u := c.Params["resource_metadata"]; u != "" {
			candidates = append(candidates, [2]string{u, resource})
			break
		}
	}
	if ru, err := url.Parse(resource); err == nil {
		mu := *ru
		mu.Path = "/.well-known/oauth-protected-resource/" + strings.TrimLeft(ru.Path, "/")
		candidates = append(candidates, [2]string{mu.String(), resource})
		mu.Path = "/.well-known/oauth-protected-resource"
		ru.Path = ""
		candidates = append(candidates, [2]string{mu.String(), ru.String()})
	}
	var as string
	for _, c := range candidates {
		prm, err := oauthex.GetProtectedResourceMetadata(ctx, c[0], c[1], hc)
		if err != nil || prm == nil {
			continue
		}
		if len(prm.AuthorizationServers) == 0 {
			return nil, errors.New("protected resource metadata has no authorization servers specified")
		}
		as = prm.AuthorizationServers[0]
		break
	}
	if as == "" {
		u := *req.URL
		u.Path, u.RawQuery, u.Fragment = "", "", ""
		as = u.String()
	}
	asm, err := auth.GetAuthServerMetadata(ctx, as, hc)
	if err != nil {
		return nil, fmt.Errorf("failed to get authorization server metadata: %w", err)
	}
	if asm == nil {
		return &registration{issuer: as, endpoint: as + "/register"}, nil
	}
	return &registration{issuer: asm.Issuer, endpoint: asm.RegistrationEndpoint}, nil
}

// regLock is the lock of cfg's registration: flows that start together,
// on this gateway or on another instance, register one client, the others
// wait and reuse it. This instance's flows queue on a channel, then take
// the lock shared by the instances (sharedRegLock).
func (f *Flows) regLock(ctx context.Context, serverID string) (unlock func(), err error) {
	f.mu.Lock()
	l := f.regs[serverID]
	if l == nil {
		l = make(chan struct{}, 1)
		f.regs[serverID] = l
	}
	f.mu.Unlock()
	select {
	case l <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	release, err := f.sharedRegLock(ctx, serverID)
	if err != nil {
		<-l
		return nil, err
	}
	return func() { release(); <-l }, nil
}

// regLockStale is how old a registration lock is when its holder is taken
// for dead (a gateway killed mid-registration): well over what a holder
// does under it, one registration request (bounded by the request timeout)
// between a credential read and a write (answered in milliseconds). A live
// holder past it costs a second registration at worst.
func (f *Flows) regLockStale() time.Duration { return 3 * f.opts.RequestTimeout }

// regLockKey is the key of serverID's registration lock in the bucket of
// pending flows; a flow's own key is a SHA-256 in hex (flowID), never this.
func regLockKey(serverID string) string { return "registering." + serverID }

// sharedRegLock takes serverID's registration lock across the gateway
// instances: a key created in the bucket of pending flows (a create fails
// while the key is there), deleted at release; one left by a dead holder
// is taken over once older than regLockStale, and the bucket's TTL drops
// it anyway. Without the bucket (an error other than the key being held)
// the flow goes on with this instance's lock alone, as before: a second
// registration at worst.
func (f *Flows) sharedRegLock(ctx context.Context, serverID string) (release func(), err error) {
	key := regLockKey(serverID)
	took := func(rev uint64) func() {
		return func() {
			dctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
			defer cancel()
			// On its revision: a lock taken over meanwhile is not ours.
			if err := f.kv.Delete(dctx, key, jetstream.LastRevision(rev)); err != nil {
				f.log.Debug("releasing the OAuth client registration lock", "server_id", serverID, "error", err)
			}
		}
	}
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		kctx, cancel := context.WithTimeout(ctx, relayTimeout)
		rev, err := f.kv.Create(kctx, key, []byte(time.Now().UTC().Format(time.RFC3339Nano)))
		if err == nil {
			cancel()
			return took(rev), nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			cancel()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			f.log.Warn("the OAuth client registration lock shared by the gateway instances is unavailable: registering under this instance's alone",
				"server_id", serverID, "error", err)
			return func() {}, nil
		}
		if e, gerr := f.kv.Get(kctx, key); gerr == nil && time.Since(e.Created()) > f.regLockStale() {
			if rev, err := f.kv.Update(kctx, key, []byte(time.Now().UTC().Format(time.RFC3339Nano)), e.Revision()); err == nil {
				cancel()
				f.log.Info("took over the OAuth client registration lock of a holder that did not release it", "server_id", serverID, "since", e.Created())
				return took(rev), nil
			}
		}
		cancel()
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// register answers go-sdk's registration request req of cfg's flow fl at
// the authorization server issuer: with the client kept for that issuer,
// else with the server's answer to req (sent on with next), whose client
// it keeps.
func (f *Flows) register(req *http.Request, cfg *model.McpConfig, fl *flow, issuer string, next http.RoundTripper) (*http.Response, error) {
	ctx := req.Context()
	unlock, err := f.regLock(ctx, cfg.ID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	kept, err := f.creds.OAuthRegisteredClient(ctx, cfg.ID)
	switch {
	case err == nil && issuersEqual(kept.Issuer, issuer) && kept.RedirectURI == f.opts.CallbackURL:
		fl.registered = kept.ClientID
		return registered(req, kept)
	case err == nil:
		// The client would be refused: another authorization server, or
		// a callback it does not know (--gateway-public-url changed).
		f.log.Info("registering a new OAuth client: the authorization server or the callback changed", "server", cfg.Slug,
			"issuer", issuer, "was", kept.Issuer, "callback", f.opts.CallbackURL, "callback_was", kept.RedirectURI)
	case apierr.Of(err) != apierr.NotFound:
		// Registering anyway would register at every flow while the
		// credential service cannot be read.
		return nil, fmt.Errorf("reading the OAuth client registered for %s: %w", cfg.Slug, err)
	}
	resp, err := next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRegistrationBytes))
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the registration response: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return resp, nil // go-sdk reports it
	}
	var got oauthex.ClientRegistrationResponse
	if err := json.Unmarshal(body, &got); err != nil || got.ClientID == "" {
		return resp, nil // go-sdk reports it
	}
	fl.registered = got.ClientID
	c := model.OAuthRegisteredClient{Issuer: issuer, RedirectURI: f.opts.CallbackURL, ClientID: got.ClientID, ClientSecret: got.ClientSecret, TokenEndpointAuthMethod: got.TokenEndpointAuthMethod}
	if err := f.keepClient(ctx, cfg, c); err != nil {
		// This flow goes on with its client; the next one registers again.
		f.log.Warn("keeping the registered OAuth client failed", "server", cfg.Slug, "code", apierr.Of(err), "error", apierr.From(err).Message)
	} else {
		f.log.Info("registered an OAuth client", "server", cfg.Slug, "issuer", issuer, "client_id", got.ClientID)
	}
	return resp, nil
}

// registered is a registration response (RFC 7591) naming the kept client c.
func registered(req *http.Request, c model.OAuthRegisteredClient) (*http.Response, error) {
	var meta oauthex.ClientRegistrationMetadata
	if req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			_ = json.NewDecoder(io.LimitReader(b, maxRegistrationBytes)).Decode(&meta)
			_ = b.Close()
		}
	}
	meta.TokenEndpointAuthMethod = c.TokenEndpointAuthMethod
	body, err := json.Marshal(&oauthex.ClientRegistrationResponse{ClientRegistrationMetadata: meta, ClientID: c.ClientID, ClientSecret: c.ClientSecret})
	if err != nil {
		return nil, fmt.Errorf("answering with the kept OAuth client: %w", err)
	}
	return &http.Response{StatusCode: http.StatusCreated, Status: "201 Created", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Request: req}, nil
}

// keepClient stores c as cfg's registered client, sealed, in the server's
// OAuth client record (merged: a confidential client's secret stays).
func (f *Flows) keepClient(ctx context.Context, cfg *model.McpConfig, c model.OAuthRegisteredClient) error {
	raw, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding the registered client: %w", err)
	}
	_, err = f.secrets.Set(ctx, model.CredSetRequest{ServerID: model.OAuthClientCredentialID(cfg.ID), Kind: model.CredOAuthClient,
		Credentials: model.Credentials{Env: map[string]string{model.OAuthRegisteredClientName: string(raw)}}})
	return err
}

// forgetClient drops cfg's registered client clientID, which the
// authorization server refused (invalid_client): the next flow registers
// a new one. A client registered since is kept.
func (f *Flows) forgetClient(cfg *model.McpConfig, clientID string) {
	ctx, cancel := context.WithTimeout(context.Background(), finishTimeout)
	defer cancel()
	unlock, err := f.regLock(ctx, cfg.ID)
	if err != nil {
		return
	}
	defer unlock()
	kept, err := f.creds.OAuthRegisteredClient(ctx, cfg.ID)
	if err != nil || kept.ClientID != clientID {
		return
	}
	if _, err := f.secrets.Delete(ctx, model.CredDeleteRequest{ServerID: model.OAuthClientCredentialID(cfg.ID), Kind: model.CredOAuthClient,
		Names: []string{model.OAuthRegisteredClientName}}); err != nil {
		f.log.Warn("forgetting the refused OAuth client failed", "server", cfg.Slug, "code", apierr.Of(err), "error", apierr.From(err).Message)
		return
	}
	f.log.Info("forgot the OAuth client the authorization server refused", "server", cfg.Slug, "client_id", clientID)
}

// issuersEqual compares issuers as go-sdk does (a trailing slash aside).
func issuersEqual(a, b string) bool {
	return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/")
}
