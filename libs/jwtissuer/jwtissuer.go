// Package jwtissuer is a local OAuth authorization server for tests of a
// resource server: it serves RFC 8414 metadata and a JWK Set over HTTP and
// signs access tokens (JWT, ES256) with generated keys it can rotate. It
// runs no authorization flow: a test mints the tokens it needs directly.
// (libs/oauthtest, if present, is the stand-in for remote MCP servers'
// authorization servers; this one is for the gateway's own token checks.)
package jwtissuer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// Paths the issuer serves.
const (
	MetadataPath = "/.well-known/oauth-authorization-server"
	JWKSPath     = "/jwks.json"
)

type signingKey struct {
	id   string
	priv *ecdsa.PrivateKey
}

// Issuer is a running test issuer. Its identifier is URL().
type Issuer struct {
	srv *httptest.Server

	mu   sync.Mutex
	keys []signingKey // published; keys[0] signs

	jwksFetches atomic.Int64
}

// Start is New for a test: it fails the test on error and closes the
// issuer when the test ends.
func Start(t testing.TB) *Issuer {
	t.Helper()
	iss, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iss.Close)
	return iss
}

// New starts an issuer with one signing key. Close it when done.
func New() (*Issuer, error) {
	i := &Issuer{}
	if err := i.Rotate(); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+MetadataPath, i.metadata)
	mux.HandleFunc("GET "+JWKSPath, i.jwks)
	i.srv = httptest.NewServer(mux)
	return i, nil
}

// URL is the issuer identifier (the iss of its tokens).
func (i *Issuer) URL() string { return i.srv.URL }

// JWKSURL is where its JWK Set is.
func (i *Issuer) JWKSURL() string { return i.srv.URL + JWKSPath }

// JWKSFetches counts the requests for the JWK Set so far.
func (i *Issuer) JWKSFetches() int64 { return i.jwksFetches.Load() }

// Close stops the server.
func (i *Issuer) Close() { i.srv.Close() }

// Rotate makes a new signing key the only published one: tokens signed
// before no longer verify, and new ones carry a kid a verifier has not seen.
func (i *Issuer) Rotate() error {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("jwtissuer: generating a key: %w", err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.keys = []signingKey{{id: uuid.NewString(), priv: priv}}
	return nil
}

// KeyID is the kid of the current signing key.
func (i *Issuer) KeyID() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.keys[0].id
}

// Sign signs claims with the current key (header kid set).
func (i *Issuer) Sign(claims jwt.Claims) (string, error) {
	i.mu.Lock()
	k := i.keys[0]
	i.mu.Unlock()
	t := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	t.Header["kid"] = k.id
	t.Header["typ"] = "at+jwt"
	s, err := t.SignedString(k.priv)
	if err != nil {
		return "", fmt.Errorf("jwtissuer: signing: %w", err)
	}
	return s, nil
}

// Claims are the claims of an access token: the registered ones, scope
// (space-separated, RFC 9068) and client_id.
type Claims struct {
	jwt.RegisteredClaims
	Scope    string `json:"scope,omitempty"`
	ClientID string `json:"client_id,omitempty"`
}

// Claims returns the claims of a token this issuer gives sub for audience
// aud with scopes, valid from a minute ago for five minutes.
func (i *Issuer) Claims(sub, aud string, scopes ...string) Claims {
	now := time.Now()
	return Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    i.URL(),
			Subject:   sub,
			Audience:  jwt.ClaimStrings{aud},
			IssuedAt:  jwt.NewNumericDate(now.Add(-time.Minute)),
			NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)),
			ExpiresAt: jwt.NewNumericDate(now.Add(5 * time.Minute)),
			ID:        uuid.NewString(),
		},
		Scope:    strings.Join(scopes, " "),
		ClientID: "test-client",
	}
}

// Token signs Claims(sub, aud, scopes...).
func (i *Issuer) Token(sub, aud string, scopes ...string) (string, error) {
	return i.Sign(i.Claims(sub, aud, scopes...))
}

// metadata serves RFC 8414 authorization server metadata. The endpoints it
// names are not served (no flow runs here); they are there because clients
// and go-sdk's discovery expect them, PKCE included.
func (i *Issuer) metadata(w http.ResponseWriter, r *http.Request) {
	u := i.URL()
	writeJSON(w, map[string]any{
		"issuer":                                u,
		"authorization_endpoint":                u + "/authorize",
		"token_endpoint":                        u + "/token",
		"jwks_uri":                              u + JWKSPath,
		"response_types_supported":              []string{"code"},
		"grant_types_supported":                 []string{"authorization_code", "client_credentials"},
		"code_challenge_methods_supported":      []string{"S256"},
		"token_endpoint_auth_methods_supported": []string{"none", "client_secret_basic"},
	})
}

// jwks serves the public half of the published keys.
func (i *Issuer) jwks(w http.ResponseWriter, r *http.Request) {
	i.jwksFetches.Add(1)
	i.mu.Lock()
	keys := append([]signingKey(nil), i.keys...)
	i.mu.Unlock()
	set := jwkset.NewMemoryStorage()
	for _, k := range keys {
		jwk, err := jwkset.NewJWKFromKey(k.priv.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{
			KID: k.id, ALG: jwkset.AlgES256, USE: jwkset.UseSig}})
		if err == nil {
			err = set.KeyWrite(r.Context(), jwk)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	raw, err := set.JSONPublic(context.WithoutCancel(r.Context()))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(raw)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
