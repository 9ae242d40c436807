package jwtauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/time/rate"
)

const (
	// unknownKIDEvery spaces the JWK Set refreshes tokens with an unknown
	// kid may cause: a flood of made-up kids costs the issuer one fetch
	// per interval, and a token of a freshly rotated key waits at most
	// that long for its refresh.
	unknownKIDEvery = time.Second
	// unknownKIDWait bounds that wait: a request queued longer behind
	// others with unknown kids is refused at once rather than held.
	unknownKIDWait = 2 * time.Second
	// refreshEvery refreshes the JWK Set on its own (retired keys go).
	refreshEvery = time.Hour
	// discoverRetry spaces the attempts to read an issuer's metadata after
	// one failed.
	discoverRetry = 10 * time.Second
)

// errKeysUnavailable is the issuer's metadata or keys not being reachable:
// no fault of the token.
var errKeysUnavailable = errors.New("the authorization server's keys are not available")

// keySet is one issuer's signing keys: its JWK Set, found from its metadata
// (or configured), fetched on first use, cached and refreshed by keyfunc.
type keySet struct {
	issuer  string
	jwksURL string // configured or discovered
	client  *http.Client
	timeout time.Duration
	life    context.Context // ends the refresh goroutine
	log     *slog.Logger

	mu      sync.Mutex
	kf      keyfunc.Keyfunc
	failed  time.Time
	lastErr error
}

// get returns the issuer's keyfunc, discovering its JWK Set on first use.
// A failed discovery is retried no sooner than discoverRetry later.
func (k *keySet) get(ctx context.Context) (keyfunc.Keyfunc, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kf != nil {
		return k.kf, nil
	}
	if !k.failed.IsZero() && time.Since(k.failed) < discoverRetry {
		return nil, k.lastErr
	}
	kf, err := k.open(ctx)
	if err != nil {
		k.failed, k.lastErr = time.Now(), fmt.Errorf("%w: %s: %v", errKeysUnavailable, k.issuer, err)
		k.log.Warn("OAuth: the issuer's keys could not be loaded", "issuer", k.issuer, "error", err)
		return nil, k.lastErr
	}
	k.kf = kf
	return kf, nil
}

// open finds the JWK Set URL (from the issuer's metadata unless
// configured) and starts keyfunc on it.
func (k *keySet) open(ctx context.Context) (keyfunc.Keyfunc, error) {
	if k.jwksURL == "" {
		// Not the request's cancellation: a client hanging up must not
		// count as the issuer failing.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.timeout)
		defer cancel()
		meta, err := sdkauth.GetAuthServerMetadata(dctx, k.issuer, k.client)
		if err != nil {
			return nil, fmt.Errorf("reading its metadata: %w", err)
		}
		if meta == nil || meta.JWKSURI == "" {
			return nil, errors.New("its metadata (RFC 8414 or OpenID Connect discovery) names no jwks_uri; set --oauth-jwks-url")
		}
		// The keys decide which tokens are genuine: fetched in clear, they
		// are whoever is on the way's. The rule of --oauth-jwks-url
		// (go-sdk checks only the scheme is not javascript: and the like).
		if u, err := url.Parse(meta.JWKSURI); err != nil || u.Host == "" || (u.Scheme != "https" && (u.Scheme != "http" || !loopback(u.Hostname()))) {
			return nil, fmt.Errorf("its metadata's jwks_uri %q is not an https URL (http only on localhost)", meta.JWKSURI)
		}
		k.jwksURL = meta.JWKSURI
	}
	noFirstErr := false
	kf, err := keyfunc.NewDefaultOverrideCtx(k.life, []string{k.jwksURL}, keyfunc.Override{
		Client:                    k.client,
		HTTPTimeout:               k.timeout,
		NoErrorReturnFirstHTTPReq: &noFirstErr,
		RefreshInterval:           refreshEvery,
		RefreshUnknownKID:         rate.NewLimiter(rate.Every(unknownKIDEvery), 1),
		RateLimitWaitMax:          unknownKIDWait,
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(_ context.Context, err error) {
				k.log.Warn("OAuth: refreshing the issuer's JWK Set failed", "issuer", k.issuer, "jwks_url", u, "error", err)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("fetching its JWK Set %s: %w", k.jwksURL, err)
	}
	return kf, nil
}
