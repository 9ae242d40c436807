package model

import (
	"fmt"
	"maps"
	"net/url"
	"path"
	"slices"
	"strings"
	"unicode"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// Normalize fills derived fields: the slug from the name, the source type, and
// the package of an HTTP server from its URL.
func (c *McpConfig) Normalize() {
	c.Name = strings.TrimSpace(c.Name)
	if c.Slug == "" {
		c.Slug = Slugify(c.Name)
		if c.Slug == "" && c.Name != "" {
			// A name of no ASCII letter or digit ("Почта", "日本語") still
			// makes a server: its slug is derived from a hash of it.
			c.Slug = "server-" + shortHash(c.Name)
		}
	}
	if c.Source.Type == "" {
		c.Source.Type = SourceManual
	}
	if c.Transport.Type == TransportHTTP && c.Package.Type == "" {
		c.Package.Type = PackageHTTP
	}
	if c.Package.Type == PackageHTTP && c.Package.Identifier == "" {
		c.Package.Identifier = c.Transport.URL
	}
	if c.AuthType == "" {
		c.AuthType = AuthNone
	}
}

// Validate applies the validation rules of docs/design.md plus the checks the
// runner relies on. The messages of the documented rules are kept word for word.
func (c *McpConfig) Validate() *apierr.Error {
	if strings.TrimSpace(c.Name) == "" {
		return apierr.Invalid("name", "Name is required")
	}
	if strings.ContainsFunc(c.Name, unicode.IsControl) {
		return apierr.Invalid("name", "Name must not contain control characters")
	}
	switch c.Source.Type {
	case "", SourceManual, SourceOfficial, SourceSmithery:
	default:
		return apierr.Invalid("source.type", "source.type must be manual, official or smithery")
	}
	if !ValidSlug(c.Slug) {
		return apierr.Invalid("slug", "Slug must match [a-z0-9_-]{1,64}")
	}
	if !SeparableSlug(c.Slug) {
		return apierr.Invalid("slug", `Slug must not contain "__" nor end in "_": "__" separates the server from the tool in <server>__<tool>`)
	}
	if strings.TrimSpace(c.Package.Identifier) == "" {
		return apierr.Invalid("package.identifier", "Package identifier required")
	}
	if strings.HasPrefix(c.Package.Identifier, "-") || strings.ContainsAny(c.Package.Identifier, "\x00\n\r") {
		return apierr.Invalid("package.identifier", "Package identifier is not valid")
	}
	if len(c.Package.RuntimeArgs) > 0 && c.Package.Type != PackageNPM && c.Package.Type != PackageDocker {
		return apierr.Invalid("package.runtime_args", "runtime_args are for npm and docker packages only")
	}
	for _, a := range c.Package.RuntimeArgs {
		if strings.ContainsAny(a, "\x00\n\r") {
			return apierr.Invalid("package.runtime_args", "runtime_args must not contain NUL or line breaks")
		}
	}
	switch c.Transport.Type {
	case "":
		return apierr.Invalid("transport", "Transport required")
	case TransportStdio:
		switch c.Package.Type {
		case PackageNPM, PackageDocker, PackageBinary:
		default:
			return apierr.Invalid("package.type", "A stdio server needs package type npm, docker or binary")
		}
	case TransportHTTP:
		u, err := url.Parse(c.Transport.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return apierr.Invalid("transport.url", "An http transport needs an http(s) URL")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Transport.Headers)) {
		if e := CheckHeader("transport.headers."+name, name, c.Transport.Headers[name]); e != nil {
			return e
		}
	}
	for i, name := range c.Transport.SecretHeaders {
		if e := CheckHeader(fmt.Sprintf("transport.secret_headers.%d", i), name, ""); e != nil {
			return e
		}
	}
	if c.Auth.PerPrincipal && c.Transport.Type != TransportHTTP {
		return apierr.Invalid("auth.per_principal", "auth.per_principal is for remote (http) servers: a stdio server is one process, shared by every caller")
	}
	if o := c.Transport.OAuth; o != nil && c.Transport.Type != TransportHTTP {
		return apierr.Invalid("transport.oauth", "transport.oauth is for http transports only")
	}
	switch c.Transport.Type {
	case TransportStdio, TransportHTTP:
	default:
		return apierr.Invalid("transport.type", "Transport type must be stdio or http")
	}
	switch c.Package.Type {
	case "", PackageNPM, PackageDocker, PackageBinary, PackageHTTP:
	default:
		return apierr.Invalid("package.type", "package.type must be npm, docker, binary or http")
	}
	switch c.AuthType {
	case "", AuthNone, AuthAPIKey, AuthKeyfile, AuthOAuth:
	default:
		return apierr.Invalid("auth_type", "Auth type must be none, api_key, keyfile or oauth")
	}
	for name, v := range c.EnvVars {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return apierr.Invalid("env_vars", "Environment variable names must be non-empty and contain no '='")
		}
		// A secret variable without a value is stored under its own name in the
		// credential service (the config service checks it is there).
		if v.Required && v.Value == "" && v.SecretRef == "" && v.KeyfilePath == "" && !v.IsSecret {
			return apierr.Invalid("env_vars."+name, "Missing required credentials")
		}
	}
	for i, g := range append(append([]string{}, c.Tools.Allow...), c.Tools.Deny...) {
		if _, err := path.Match(g, ""); err != nil || g == "" {
			return apierr.Invalid("tools", fmt.Sprintf("tool filter %d (%q) is not a valid glob", i, g))
		}
	}
	if c.Pin != "" && !slices.Contains(PinPolicies, c.Pin) {
		return apierr.Invalid("pin", "pin must be strict, warn or off")
	}
	if v := c.SecretScan.Arguments; v != "" && !slices.Contains(SecretsPolicies, v) {
		return apierr.Invalid("secret_scan.arguments", "secret_scan.arguments must be block, redact or off")
	}
	if v := c.SecretScan.Results; v != "" && !slices.Contains(SecretsPolicies, v) {
		return apierr.Invalid("secret_scan.results", "secret_scan.results must be block, redact or off")
	}
	for i, r := range c.Roots {
		u, err := url.Parse(r.URI)
		if err != nil || u.Scheme != "file" || !path.IsAbs(u.Path) || u.RawQuery != "" || u.Fragment != "" {
			return apierr.Invalid(fmt.Sprintf("roots.%d.uri", i), fmt.Sprintf("root %q must be a file:// URI of an absolute path", r.URI))
		}
	}
	if c.Runtime.CallTimeout < 0 || c.Runtime.StartTimeout < 0 {
		return apierr.Invalid("runtime", "Timeouts must not be negative")
	}
	if c.Runtime.MaxInflight < 0 || c.Runtime.MaxInflight > 10000 {
		return apierr.Invalid("runtime.max_inflight", "max_inflight must be between 0 (runner default) and 10000")
	}
	if c.Runtime.Replicas < 0 || c.Runtime.Replicas > 64 {
		return apierr.Invalid("runtime.replicas", "replicas must be between 0 (one) and 64")
	}
	return nil
}
