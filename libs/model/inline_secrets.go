package model

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// Secrets written into a URL or a command line would stay in clear in the
// config (KV, history, exports, every reply), unlike every other way of
// giving one, which is sealed to the credential service. They are refused,
// with the way to give them instead (docs/design.md §11): a header in
// transport.secret_headers for a remote server, a secret env var for a
// package. No message quotes the value.

// argSecretWords make a command-line option secret when its name holds one
// (--api-key=…, --token …, --client-secret=…, --db-password=…).
var argSecretWords = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"}

// secretOption reports whether a command-line option name (without its
// leading dashes) carries a secret.
func secretOption(name string) bool {
	if words := nameWords(name); len(words) > 0 && slices.Contains([]string{"FILE", "PATH", "DIR", "ENV", "VAR"}, words[len(words)-1]) {
		return false // --token-file=/run/x names where the secret is
	}
	n := strings.ToUpper(name)
	for _, w := range argSecretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return LooksSecret(name)
}

// plainValue reports whether an option's value cannot be a secret whatever
// the option is called: a boolean (--oauth-enabled true), a count of LLM
// tokens (--max-tokens 4096: a number after a name about tokens in the
// plural or a bound), or a URL without credentials (--auth-server=https://…).
func plainValue(name, v string) bool {
	switch strings.ToLower(v) {
	case "true", "false", "yes", "no", "on", "off":
		return true
	}
	if strings.Contains(v, "://") {
		u, err := url.Parse(v)
		return err == nil && u.Host != "" && !SecretURL(v)
	}
	if v == "" || len(v) > 9 || strings.Trim(v, "0123456789") != "" {
		return false
	}
	for _, w := range nameWords(name) {
		switch w {
		case "TOKENS", "MAX", "MIN", "LIMIT", "BUDGET", "COUNT":
			return true
		}
	}
	return false
}

// RefuseInlineSecrets tells which field of c holds a secret in clear where
// only a sealed one may go, or nil: a URL (transport.url, the identifier of
// an http package) with a password or a secret-named query parameter, or an
// argument such as --api-key=… / --token … / a secret URL, or the value of
// a plain env var that has a credential's shape (SecretValue).
func RefuseInlineSecrets(c *McpConfig) *apierr.Error {
	urlHint := "a secret in a URL is not allowed: give it as a header in transport.secret_headers (sealed to the credential service), e.g. Authorization"
	if SecretURL(c.Transport.URL) {
		return apierr.Invalid("transport.url", urlHint)
	}
	if SecretURL(c.Package.Identifier) {
		return apierr.Invalid("package.identifier", urlHint)
	}
	argHint := "a secret on the command line is not allowed (every local user can read it, and the config is stored in clear): " +
		"give it as a secret env var (env_vars.NAME with is_secret) and let the server read it there"
	for _, list := range []struct {
		field string
		args  []string
	}{{"package.runtime_args", c.Package.RuntimeArgs}, {"package.args", c.Package.Args}} {
		for i, a := range list.args {
			field := fmt.Sprintf("%s.%d", list.field, i)
			if SecretURL(a) {
				return apierr.Invalid(field, argHint)
			}
			if !strings.HasPrefix(a, "-") {
				continue
			}
			name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if name == "e" || name == "env" { // docker -e NAME=VALUE
				if !hasVal && i+1 < len(list.args) {
					val = list.args[i+1]
				}
				if k, v, ok := strings.Cut(val, "="); ok && v != "" && LooksSecret(k) {
					return apierr.Invalid(field, argHint)
				}
				continue
			}
			if !secretOption(name) {
				continue
			}
			if hasVal && val != "" && !plainValue(name, val) {
				return apierr.Invalid(field, argHint)
			}
			// --token VALUE: the next word is the secret.
			if next := i + 1; !hasVal && next < len(list.args) && !strings.HasPrefix(list.args[next], "-") && list.args[next] != "" &&
				!plainValue(name, list.args[next]) {
				return apierr.Invalid(fmt.Sprintf("%s.%d", list.field, next), argHint)
			}
		}
	}
	// A plain env var's value is stored as it is: one with a credential's
	// shape (GH=ghp_…) would be a secret in clear. A secret one (is_secret,
	// a secret name, a URL with credentials) is moved to the credential
	// service before it is stored (credclient.ExtractSecrets): not refused.
	for _, name := range slices.Sorted(maps.Keys(c.EnvVars)) {
		v := c.EnvVars[name]
		if v.IsSecret || LooksSecret(name) || SecretURL(v.Value) || !SecretValue(v.Value) {
			continue
		}
		return apierr.Invalid("env_vars."+name+".value", "the value of "+name+" looks like a secret (a token or key), and a plain variable's value is stored in clear: "+
			"make it a secret variable (mcpbus servers add/edit --secret-env "+name+"; in a config, env_vars."+name+" with is_secret), "+
			"whose value is sealed to the credential service")
	}
	return nil
}
