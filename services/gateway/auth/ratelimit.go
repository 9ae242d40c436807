package auth

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Rate limit defaults.
const (
	DefaultRPS     = 20
	DefaultBurst   = 40
	DefaultMaxKeys = 10000
	DefaultIdleTTL = 10 * time.Minute
)

// LimiterOptions configure a Limiter; zero values take the defaults.
type LimiterOptions struct {
	// RPS and Burst are the token bucket of a key without its own rate.
	RPS   float64
	Burst int
	// MaxKeys bounds the buckets kept; IdleTTL is how long an unused one lives.
	MaxKeys int
	IdleTTL time.Duration
	// OnRefuse, when set, is told of each request Middleware refuses (metrics).
	OnRefuse func(*http.Request)
}

// bucketKey names a bucket: a key id or an address, and for the failed-login
// throttle an address and a key id. Two strings, not one joined, so that
// looking a bucket up allocates nothing.
type bucketKey struct{ key, sub string }

type bucket struct {
	lim      *rate.Limiter
	rate     model.KeyRate
	lastSeen time.Time
}

// Limiter keeps one token bucket per API key (per client address when auth
// is off). The map is bounded: idle buckets are swept, and when it is full
// the least recently used one goes.
type Limiter struct {
	opts LimiterOptions

	mu        sync.Mutex
	buckets   map[bucketKey]*bucket
	lastSweep time.Time
}

// NewLimiter returns a limiter with opts.
func NewLimiter(opts LimiterOptions) *Limiter {
	if opts.RPS <= 0 {
		opts.RPS = DefaultRPS
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.IdleTTL <= 0 {
		opts.IdleTTL = DefaultIdleTTL
	}
	return &Limiter{opts: opts, buckets: map[bucketKey]*bucket{}, lastSweep: time.Now()}
}

// Allow takes one token of key's bucket (override, when set, is the key's own
// rate). When none is left it reports how long until one is.
func (l *Limiter) Allow(key string, override *model.KeyRate) (ok bool, retryAfter time.Duration) {
	return l.allow(bucketKey{key: key}, override)
}

func (l *Limiter) allow(key bucketKey, override *model.KeyRate) (ok bool, retryAfter time.Duration) {
	now := time.Now()
	want := model.KeyRate{RPS: l.opts.RPS, Burst: l.opts.Burst}
	if override != nil {
		want = *override
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil || b.rate != want {
		l.makeRoom(now)
		b = &bucket{lim: rate.NewLimiter(rate.Limit(want.RPS), want.Burst), rate: want}
		l.buckets[key] = b
	}
	b.lastSeen = now
	r := b.lim.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now) // give the token back: this request is refused
		return false, d
	}
	return true, 0
}

// Peek reports whether key's bucket holds a token, without taking one, and
// when it does not, how long until it will. A key without a bucket has one.
func (l *Limiter) Peek(key string) (ok bool, retryAfter time.Duration) {
	return l.peek(bucketKey{key: key})
}

func (l *Limiter) peek(key bucketKey) (ok bool, retryAfter time.Duration) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		return true, 0
	}
	tokens := b.lim.TokensAt(now)
	if tokens >= 1 {
		return true, 0
	}
	if r := float64(b.lim.Limit()); r > 0 {
		return false, time.Duration((1 - tokens) / r * float64(time.Second))
	}
	return false, time.Minute
}

// DefaultFailures is how many failed authentications one bucket (a client
// address, or an address and key id) may take in a minute before it is
// throttled.
const DefaultFailures = 10

// NewFailureLimiter is the throttle of failed authentications
// (MiddlewareOptions.Failures): perMinute failures per bucket (a burst of as
// many, refilled over a minute; <= 0: DefaultFailures), then 429 until the
// bucket refills. At most DefaultMaxKeys buckets are kept, each forgotten
// two minutes after its last failure (its bucket is full again by then).
func NewFailureLimiter(perMinute int) *Limiter {
	if perMinute <= 0 {
		perMinute = DefaultFailures
	}
	return NewLimiter(LimiterOptions{RPS: float64(perMinute) / 60, Burst: perMinute, IdleTTL: 2 * time.Minute})
}

// Len is how many buckets are kept.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// makeRoom sweeps idle buckets now and then, and evicts the least recently
// used one when the map is full. Callers hold mu.
func (l *Limiter) makeRoom(now time.Time) {
	if now.Sub(l.lastSweep) >= l.opts.IdleTTL/2 || len(l.buckets) >= l.opts.MaxKeys {
		for k, b := range l.buckets {
			if now.Sub(b.lastSeen) >= l.opts.IdleTTL {
				delete(l.buckets, k)
			}
		}
		l.lastSweep = now
	}
	for len(l.buckets) >= l.opts.MaxKeys {
		oldest, at := bucketKey{}, now
		for k, b := range l.buckets {
			if !b.lastSeen.After(at) {
				oldest, at = k, b.lastSeen
			}
		}
		delete(l.buckets, oldest)
	}
}

// Middleware refuses requests over the caller's rate with 429 RATE_LIMITED
// and Retry-After (whole seconds, at least 1). It runs after Middleware so the
// bucket is the key's; requests without a principal (health) are not limited.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := PrincipalFrom(r.Context())
		if p == nil {
			next.ServeHTTP(w, r)
			return
		}
		// A key's bucket is its id (hex); with auth off each client address
		// (which has dots or colons) gets its own. Neither is built per request.
		// An OAuth token's key id is only its subject, which two issuers may
		// both use: its bucket also names the issuer.
		key := p.KeyID
		switch {
		case key == anonymousID:
			key = ClientAddr(r)
		case p.Issuer != "":
			key = p.Issuer + "#" + key
		}
		ok, wait := l.Allow(key, p.Rate)
		if !ok {
			if l.opts.OnRefuse != nil {
				l.opts.OnRefuse(r)
			}
			secs := retryAfter(w, wait)
			WriteError(w, 0, apierr.Newf(apierr.RateLimited, "rate limit exceeded for this key; retry in %ds", secs))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// remoteIP is the client address of r, without the port.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// retryAfter sets Retry-After to wait in whole seconds (at least 1) and
// returns them.
func retryAfter(w http.ResponseWriter, wait time.Duration) int {
	secs := int(math.Ceil(wait.Seconds()))
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	return secs
}
