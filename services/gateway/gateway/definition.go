package gateway

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/libs/settings"
	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/auth/jwtauth"
	"github.com/mcpbus/mcpbus/services/gateway/openai"
)

// DefaultCallTimeout is how long the gateway waits for a tool call's answer:
// longer than the runner's default call timeout, so the runner's own timeout
// error arrives first, and room for servers configured with longer ones.
const DefaultCallTimeout = 60 * time.Second

// Definition is the gateway's row of the service table.
func Definition() service.Definition {
	return service.Definition{Name: "gateway", Version: auth.Version,
		Summary: "the HTTP edge: aggregated MCP endpoint /mcp, REST API, API keys and rate limits",
		Options: func() service.Options { return &Options{} }}
}

// Register adds the gateway's settings.
func (o *Options) Register(s *settings.Set) {
	s.String(&o.Addr, "http-addr", "", DefaultAddr, "where the gateway listens; empty: no gateway (mcpbus up)")
	s.Bool(&o.NoAuth, "no-auth", "", false, "turn API keys OFF: anyone reaching the gateway may call every tool (local experiments only)")
	s.Float64(&o.RateRPS, "rate-rps", "", auth.DefaultRPS, "default requests per second per API key")
	s.Int(&o.RateBurst, "rate-burst", "", auth.DefaultBurst, "default burst per API key")
	s.Int64(&o.MaxBodyBytes, "max-body", "", DefaultMaxBodyBytes, "request body limit in bytes (larger: 413)")
	s.Strings(&o.TrustedProxies, "trusted-proxy", "MCPBUS_TRUSTED_PROXIES", nil, "CIDR of a reverse proxy whose X-Forwarded-For (or Forwarded) names the client address for the failed-login throttle and the log (repeat, or a comma list; default none: the direct peer is the client)")
	s.Strings(&o.CORSOrigins, "cors-origin", "MCPBUS_CORS_ORIGINS", nil, "browser origin allowed by CORS (repeat, or a comma list; * for any; default none)")
	s.Duration(&o.MCP.CallTimeout, "gateway-call-timeout", "", DefaultCallTimeout, "how long the gateway waits for a tool call's answer")
	s.Bool(&o.MCP.Stateless, "stateless", "", false, "serve every /mcp client without sessions (clients before protocol 2026-07-28 get a temporary session per request); without it 2026-07-28 requests are sessionless and older clients get sessions")
	s.Duration(&o.ChatTurnTimeout, "gateway-chat-timeout", "", openai.DefaultTurnTimeout, "how long POST /v1/chat/completions waits for its turn before cancelling it")
	s.Strings(&o.OAuth.Issuers, "oauth-issuer", "", nil, "trusted OAuth authorization server (issuer URL; repeat for several): its access tokens (JWT) are accepted beside API keys (default none: API keys only)")
	s.String(&o.OAuth.Resource, "oauth-resource", "", "", "the gateway's public MCP URL, e.g. https://mcp.example.com/mcp: the resource of its OAuth metadata and the default token audience (required with --oauth-issuer)")
	s.Strings(&o.OAuth.Audiences, "oauth-audience", "", nil, "accepted token audience (aud; repeat for several; default --oauth-resource)")
	s.String(&o.OAuth.JWKSURL, "oauth-jwks-url", "", "", "the issuer's JWK Set URL (default: its jwks_uri from its RFC 8414 / OpenID Connect metadata)")
	s.Strings(&o.OAuth.ScopeMap, "oauth-scope-map", "", nil, "map a token scope to grants: '<scope>=<grant> [<grant>...]', grants admin, call, chat or tool:<glob> (repeat; mcpbus:<grant> scopes need no entry)")
	s.Duration(&o.TokenRevocationTTL, "oauth-revocation-ttl", "", jwtauth.DefaultRevocationTTL, "how long a revoked access token (mcpbus tokens revoke) stays refused: at least the longest access-token lifetime of the issuers")
	s.String(&o.JaegerURL, "gateway-jaeger-url", "", "", "base URL of the Jaeger UI, e.g. http://127.0.0.1:16686; the web console links each call's trace there (default: no links)")
	s.String(&o.AuditKeysFile, "audit-keys", "MCPBUS_AUDIT_KEYS", "", "the audit writers' public keys as mcpbus identities prints them, for GET /api/v1/audit/verify (default: on mcpbus up, the seeds of <data dir>/nats; elsewhere none, and the endpoint is unavailable)")
	s.String(&o.PublicURL, "gateway-public-url", "", "", "base URL browsers reach the gateway at, for the OAuth callback <url>/oauth/callback (default: http://<http-addr>)")
}

// Validate checks the limits (zero takes the default).
func (o *Options) Validate() error {
	switch {
	case o.RateRPS < 0:
		return fmt.Errorf("--rate-rps %v must not be negative", o.RateRPS)
	case o.RateBurst < 0:
		return fmt.Errorf("--rate-burst %d must not be negative", o.RateBurst)
	case o.MaxBodyBytes < 0:
		return fmt.Errorf("--max-body %d must not be negative", o.MaxBodyBytes)
	case o.MCP.CallTimeout < 0:
		return fmt.Errorf("--gateway-call-timeout %s must not be negative", o.MCP.CallTimeout)
	case o.TokenRevocationTTL < 0:
		return fmt.Errorf("--oauth-revocation-ttl %s must not be negative", o.TokenRevocationTTL)
	case o.ChatTurnTimeout < 0:
		return fmt.Errorf("--gateway-chat-timeout %s must not be negative", o.ChatTurnTimeout)
	}
	if _, err := auth.ParseProxies(o.TrustedProxies); err != nil {
		return err
	}
	if err := o.OAuth.Validate(); err != nil {
		return err
	}
	if o.NoAuth && o.OAuth.Enabled() {
		return fmt.Errorf("--oauth-issuer needs authentication on (it is off with --no-auth)")
	}
	if o.NoAuth && slices.ContainsFunc(o.CORSOrigins, func(s string) bool { return strings.Contains(s, "*") }) {
		// Every web page the user opens could read every answer (a pattern
		// such as https://* matches any origin).
		return fmt.Errorf("--cors-origin with '*' needs authentication on (it is off with --no-auth): name the exact origins of your browser clients")
	}
	if err := validPublicURL(o.PublicURL); err != nil {
		return err
	}
	return validJaegerURL(o.JaegerURL)
}

// validPublicURL accepts "" or an absolute http(s) URL without credentials,
// query or fragment: OAuth redirect URIs are built on it.
func validPublicURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("--gateway-public-url %q is not a URL: %w", s, err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return fmt.Errorf("--gateway-public-url %q must be an http:// or https:// URL with a host", s)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("--gateway-public-url %q must have no credentials, query or fragment", s)
	}
	return nil
}

// validJaegerURL accepts "" or an absolute http(s) URL without credentials,
// query or fragment: it is handed to every key holder's browser, and the
// console appends /trace/<id> to it.
func validJaegerURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("--gateway-jaeger-url %q is not a URL: %w", s, err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return fmt.Errorf("--gateway-jaeger-url %q must be an http:// or https:// URL with a host", s)
	case u.User != nil:
		return fmt.Errorf("--gateway-jaeger-url must not hold credentials: the console shows it to every key holder")
	case u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(s, "?") || strings.HasSuffix(s, "#"):
		return fmt.Errorf("--gateway-jaeger-url %q must not have a query or fragment (the console appends /trace/<id>)", s)
	}
	return nil
}

// Build makes the gateway and binds its listener (nil when --http-addr is
// empty: mcpbus up without a gateway).
func (o *Options) Build(ctx context.Context, env service.Env) (service.Service, error) {
	if o.Addr == "" {
		return nil, nil
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	opts := *o
	opts.Prefix, opts.Logger, opts.Replicas = env.Prefix, env.Logger, env.Replicas
	if opts.DataDir == "" {
		opts.DataDir = env.DataDir
	}
	keys, err := auditKeys(opts.AuditKeysFile, env)
	if err != nil {
		return nil, err
	}
	if opts.AuditKeys == nil {
		opts.AuditKeys = keys
	}
	// Calls to a runner in this process skip NATS, still bound by what the
	// bus lets the gateway's identity publish (none on a bus without them).
	opts.MayPublish = func(string) bool { return true }
	if env.Identity != nil {
		perms, err := access.For(access.Gateway, bus.NewSubjects(env.Prefix).Prefix, env.Conn.Opts.InboxPrefix)
		if err != nil {
			return nil, err
		}
		opts.MayPublish = perms.Publisher()
	}
	if opts.Audit, err = env.AuditWriter(string(access.Gateway)); err != nil {
		return nil, err
	}
	g, err := New(ctx, env.Conn, opts)
	if err != nil {
		opts.Audit.Close(0) // a second Close (after New's) does nothing
		return nil, err
	}
	return g, nil
}

// auditKeys are the writers' public keys the verify endpoint trusts: the
// file given, else on a shared host (mcpbus up) the seeds it keeps.
func auditKeys(file string, env service.Env) (audit.Keys, error) {
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("--audit-keys: %w", err)
		}
		defer f.Close()
		var roles []string
		for _, r := range access.ServiceRoles() {
			roles = append(roles, string(r))
		}
		keys, err := audit.ReadKeys(f, roles)
		if err != nil {
			return nil, fmt.Errorf("--audit-keys %s: %w", file, err)
		}
		return keys, nil
	}
	if !env.SharedHost || env.Identity == nil {
		return nil, nil
	}
	keys, err := audit.SeedKeys(filepath.Join(env.DataDir, "nats"))
	if err != nil {
		return nil, fmt.Errorf("gateway: the audit writers' keys: %w", err)
	}
	return keys, nil
}

// Announce tells where the gateway is and where its admin key is.
func (g *Gateway) Announce(w io.Writer) {
	fmt.Fprintf(w, "gateway: MCP endpoint http://%s/mcp, REST API http://%s/api/v1 (OpenAPI at /api/v1/openapi.json)\n", g.Addr(), g.Addr())
	if g.console.Built() {
		fmt.Fprintf(w, "gateway: web console http://%s/ (log in with an API key)\n", g.Addr())
	} else {
		fmt.Fprintf(w, "gateway: web console http://%s/ is not built into this binary (make console, then rebuild)\n", g.Addr())
	}
	if g.tokens != nil {
		fmt.Fprintf(w, "gateway: OAuth access tokens of %s accepted for %s; resource metadata at %s\n",
			strings.Join(g.opts.OAuth.Issuers, ", "), g.opts.OAuth.Resource, g.tokens.MetadataURL())
	}
	switch {
	case g.opts.NoAuth:
		fmt.Fprintln(w, "WARNING: authentication is OFF (--no-auth): anyone who can reach the gateway may call every tool and change every server")
	case g.AdminKeyCreated():
		fmt.Fprintf(w, "gateway: an admin API key was written to %s (0600); send it as 'Authorization: Bearer <key>'; make more with mcpbus keys create\n", g.AdminKeyPath())
	default:
		fmt.Fprintf(w, "gateway: the admin API key is in %s\n", g.AdminKeyPath())
	}
}
