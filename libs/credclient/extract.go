package credclient

import (
	"maps"
	"net/http"
	"slices"

	"github.com/mcpbus/mcpbus/libs/model"
)

// The writers of configs (libs/client, hence the CLI and the gateway) take
// secrets out of a config with ExtractSecrets and seal them; the config
// service runs the same function on what arrives, to refuse a value that is
// still there.

// ExtractSecrets moves every secret value out of cfg: env vars marked
// is_secret (or named like a secret) that carry a value, and transport
// headers named like a secret. It returns them merged with given (which wins
// on a clash: it is the explicit channel for secrets). A secret env var keeps
// only its reference (secret_ref = where the value is stored).
func ExtractSecrets(cfg *model.McpConfig, given *model.Credentials) model.Credentials {
	out := model.Credentials{}
	if given != nil {
		out.Env = maps.Clone(given.Env)
		out.Headers = maps.Clone(given.Headers)
		out.Keyfiles = maps.Clone(given.Keyfiles)
		if given.OAuth != nil {
			tok := *given.OAuth
			out.OAuth = &tok
		}
	}
	if len(cfg.EnvVars) > 0 {
		vars := make(map[string]model.EnvVar, len(cfg.EnvVars))
		for name, v := range cfg.EnvVars {
			secret := v.IsSecret || model.LooksSecret(name) || model.SecretURL(v.Value)
			switch {
			case !secret || v.KeyfilePath != "":
			case v.Value != "":
				ref := v.SecretRef
				if ref == "" {
					ref = name
				}
				if out.Env == nil {
					out.Env = map[string]string{}
				}
				if _, ok := out.Env[ref]; !ok {
					out.Env[ref] = v.Value
				}
				v.Value, v.SecretRef, v.IsSecret = "", ref, true
			case v.IsSecret && v.SecretRef == "":
				// Stored under its own name (what the runner assumes too);
				// an explicit reference lets the required check find it.
				v.SecretRef = name
			}
			vars[name] = v
		}
		cfg.EnvVars = vars
	}
	// Headers named like a secret, or listed as secret, keep only their name
	// (in secret_headers, which an export writes as a ${VAR} placeholder).
	secretHeaders := map[string]bool{}
	for _, name := range cfg.Transport.SecretHeaders {
		secretHeaders[http.CanonicalHeaderKey(name)] = true
	}
	if len(cfg.Transport.Headers) > 0 {
		headers := map[string]string{}
		for name, val := range cfg.Transport.Headers {
			if !model.LooksSecret(name) && !secretHeaders[http.CanonicalHeaderKey(name)] {
				headers[name] = val
				continue
			}
			if out.Headers == nil {
				out.Headers = map[string]string{}
			}
			if _, ok := out.Headers[name]; !ok {
				out.Headers[name] = val
			}
		}
		cfg.Transport.Headers = headers
		if len(headers) == 0 {
			cfg.Transport.Headers = nil
		}
	}
	names := slices.Clone(cfg.Transport.SecretHeaders)
	for name := range out.Headers {
		if !secretHeaders[http.CanonicalHeaderKey(name)] {
			secretHeaders[http.CanonicalHeaderKey(name)] = true
			names = append(names, name)
		}
	}
	slices.Sort(names)
	cfg.Transport.SecretHeaders = names
	return out
}
