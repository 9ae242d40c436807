package oauthflow

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// A per-principal flow is bound to the browser of the principal who
// started it, not only to its state: otherwise whoever opened the
// provider's URL and approved would make their upstream account the
// starter's (a URL handed to a colleague binds the colleague's account to
// the sender). So its start hands out the console's page for the flow
// (ContinuePath), which the principal opens signed in with their own key;
// the page's continue request (Flows.Continue) proves the key is the
// starter's, sets a cookie of random value in that browser, records the
// value's SHA-256 with the flow and answers the provider's URL. The
// callback is taken only with that cookie. The server's own flows (an
// admin's `mcpbus servers auth`) and those the operator starts for a
// principal (`--principal`, which an agent has no browser session to
// prove; the operator hands the URL to whoever is to approve) stay bound
// by state alone.

// ContinuePath is the console's route that continues a per-principal flow:
// <public URL>/#/authorizations/continue/<server>/<flow>.
const ContinuePath = "/#/authorizations/continue/"

// cookiePrefix names a flow's binding cookie (+ the first 16 hex digits of
// its id, so that flows of one browser do not overwrite each other's);
// over https it is a __Host- cookie, which no other origin can set.
const cookiePrefix = "mcpbus-oauth-"

// errNotStarter refuses a continue by another principal than the flow's.
var errNotStarter = apierr.New(apierr.Unauthorized, "This authorization was started by another user: only they can continue it, signed in with their own key. Authorize yourself from My authorizations.").WithField("flow")

// errUnbound refuses a per-principal flow's callback from a browser
// without the cookie its continue set.
var errUnbound = apierr.New(apierr.Unauthorized, "This browser did not continue the authorization: open the link mcpbus gave you, signed in to the console with your own key, and approve from there.").WithField("state")

// continueURL is the console's page for a per-principal flow.
func (f *Flows) continueURL(server, id string) string {
	return strings.TrimSuffix(f.opts.CallbackURL, CallbackPath) + ContinuePath + url.PathEscape(server) + "/" + id
}

// secureCookies reports whether the callback is served over https (the
// cookie is then Secure and __Host-).
func (f *Flows) secureCookies() bool { return strings.HasPrefix(f.opts.CallbackURL, "https://") }

// cookieName is the binding cookie of the flow id.
func (f *Flows) cookieName(id string) string {
	if len(id) > 16 {
		id = id[:16]
	}
	if f.secureCookies() {
		return "__Host-" + cookiePrefix + id
	}
	return cookiePrefix + id
}

// cookie is the binding cookie of flow id with value v until expires (an
// expired one when v is "": the callback clears it).
func (f *Flows) cookie(id, v string, expires time.Time) *http.Cookie {
	c := &http.Cookie{Name: f.cookieName(id), Value: v, Path: "/", HttpOnly: true, Secure: f.secureCookies(),
		// Lax: the provider's redirect to the callback is a top-level
		// navigation from another site, which Strict would leave bare.
		SameSite: http.SameSiteLaxMode}
	if v == "" {
		c.MaxAge = -1
	} else {
		c.MaxAge = max(1, int(time.Until(expires).Seconds())+1)
	}
	return c
}

// Continue continues the per-principal flow id (OAuthStartReply.Flow) of
// server for principal, who must be the one it was started for: it returns the
// provider's authorization URL and the cookie the browser must carry back
// to the callback. The flow may be held by another gateway instance: the
// request goes to it sealed, as a callback does.
func (f *Flows) Continue(ctx context.Context, server, id, principal string) (model.OAuthContinueReply, *http.Cookie, error) {
	if len(id) != sha256.Size*2 || strings.Trim(id, "0123456789abcdef") != "" {
		return model.OAuthContinueReply{}, nil, apierr.Invalid("flow", "flow must be the 64 hex digits the authorization's link names")
	}
	if principal == "" || principal == model.PrincipalOperator {
		return model.OAuthContinueReply{}, nil, errNotStarter
	}
	nonce := rand.Text()
	sum := sha256.Sum256([]byte(nonce))
	out, fl, err := f.relayTo(ctx, id, server, model.OAuthCallback{Continue: true, Principal: principal, Binding: hex.EncodeToString(sum[:])})
	if err != nil {
		return model.OAuthContinueReply{}, nil, err
	}
	return model.OAuthContinueReply{Server: out.Server, AuthorizationURL: out.AuthorizationURL, ExpiresAt: fl.ExpiresAt},
		f.cookie(id, nonce, fl.ExpiresAt), nil
}

// bindingCookie is the value of the binding cookie of the flow of state
// that r carries ("" if none).
func (f *Flows) bindingCookie(r *http.Request, state string) string {
	c, err := r.Cookie(f.cookieName(flowID(state)))
	if err != nil {
		return ""
	}
	return c.Value
}

// continued records, in the flow holder, a continue of fl by cb's
// principal, and answers the provider's URL.
func (fl *flow) continued(cb model.OAuthCallback) (string, error) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if !fl.bind {
		return "", apierr.Invalid("flow", "this authorization needs no continue: open the provider's URL it was started with")
	}
	if cb.Principal != fl.principal {
		return "", errNotStarter
	}
	b, err := hex.DecodeString(cb.Binding)
	if err != nil || len(b) != sha256.Size {
		return "", apierr.Invalid("binding", "a continue needs the SHA-256 of its cookie")
	}
	// The newest continue of the starter wins: a second browser (or tab)
	// of theirs takes the flow over; no one else can.
	fl.binding = b
	return fl.authURL, nil
}

// bound reports whether a callback with cookie may complete fl: always
// for a flow bound by state alone; else only with the cookie of its
// latest continue.
func (fl *flow) bound(cookie string) bool {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if !fl.bind {
		return true
	}
	if fl.binding == nil || cookie == "" {
		return false
	}
	sum := sha256.Sum256([]byte(cookie))
	return subtle.ConstantTimeCompare(sum[:], fl.binding) == 1
}
