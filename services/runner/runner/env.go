package runner

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// maxKeyfileBytes bounds a keyfile read into the environment.
const maxKeyfileBytes = 64 << 10

// buildEnvironment builds a child's environment: plain values as they are,
// secret references through the credential service, keyfiles read at spawn
// time. It returns the child's environment, the secret headers of an HTTP
// server, its OAuth access token (nil without one) and every secret value it handed out (resolved env and header
// values, keyfile contents, secrets written inline), which the caller passes
// only to the stderr redaction of this launch. A required variable that cannot
// be resolved fails the start with VALIDATION_ERROR "Missing required
// credentials"; no value is ever put into an error or a log line.
func (r *Runner) buildEnvironment(ctx context.Context, cfg *model.McpConfig) (env, headers map[string]string, oauth *model.ResolvedOAuth, secrets []string, err error) {
	env = make(map[string]string, len(cfg.EnvVars))
	var creds model.ResolvedCredentials
	if cfg.UsesCredentials() {
		if r.opts.Resolver == nil {
			return nil, nil, nil, nil, apierr.Newf(apierr.ServiceUnavailable, "server %s needs credentials and this runner has no credential service", cfg.Slug)
		}
		if creds, err = r.opts.Resolver.Resolve(ctx, cfg.ID); err != nil {
			if retryable(apierr.From(err)) {
				err = credentialsUnavailable{err}
			}
			return nil, nil, nil, nil, err
		}
	}
	for _, val := range creds.Env {
		secrets = append(secrets, val)
	}
	for _, val := range creds.Headers {
		secrets = append(secrets, val)
		// "Bearer <token>": the child may print the token alone.
		if _, token, ok := strings.Cut(val, " "); ok {
			secrets = append(secrets, strings.TrimSpace(token))
		}
	}
	// Secrets stored without a matching variable in the config (api_key auth
	// set through `mcpbus cred set`, an OAuth token's env var) go in as well.
	for name, val := range creds.Env {
		if model.EnvNameDenied(name) { // a secret stored under a hook's name (cred set)
			return nil, nil, nil, nil, apierr.Invalid("env_vars."+name, fmt.Sprintf("environment variable %s is not allowed: it changes what the runtime loads or runs", name))
		}
		env[name] = val
	}
	for name, path := range creds.Keyfiles {
		if model.EnvNameDenied(name) {
			return nil, nil, nil, nil, apierr.Invalid("env_vars."+name, fmt.Sprintf("environment variable %s is not allowed: it changes what the runtime loads or runs", name))
		}
		val, err := r.readKeyfile(name, path)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		env[name] = val
		secrets = append(secrets, val)
	}
	for name, v := range cfg.EnvVars {
		switch {
		case v.StoredSecret() != "":
			ref := v.StoredSecret()
			if ref == model.SecretByName {
				ref = name
			}
			if val, ok := creds.Env[ref]; ok {
				env[name] = val
			} else if _, ok := env[name]; !ok && v.Required {
				return nil, nil, nil, nil, apierr.Invalid("env_vars."+name, "Missing required credentials")
			}
		case v.KeyfilePath != "":
			val, err := r.readKeyfile(name, v.KeyfilePath)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			env[name] = val
			secrets = append(secrets, val)
		default:
			if v.Value == "" && v.Required {
				return nil, nil, nil, nil, apierr.Invalid("env_vars."+name, "Missing required credentials")
			}
			env[name] = v.Value
			if v.IsSecret || model.LooksSecret(name) || model.SecretURL(v.Value) {
				secrets = append(secrets, v.Value) // a secret written inline into KV
			}
		}
	}
	for _, h := range cfg.Transport.SecretHeaders {
		if _, ok := creds.Headers[h]; !ok {
			return nil, nil, nil, nil, apierr.Invalid("transport.secret_headers", "Missing required credentials")
		}
	}
	return env, creds.Headers, creds.OAuth, secrets, nil
}

// readKeyfile reads the value of env var name from a keyfile: it must be
// allowed by the policy (checkKeyfile) and be a regular file that others
// cannot read (a world-readable key is refused).
func (r *Runner) readKeyfile(name, path string) (string, error) {
	field := "env_vars." + name + ".keyfile_path"
	resolved, e := r.checkKeyfile(name, path)
	if e != nil {
		return "", e
	}
	// O_NOFOLLOW: the resolved path must not have become a link since.
	f, err := os.OpenFile(resolved, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", apierr.Invalid(field, fmt.Sprintf("keyfile for %s cannot be read: %v", name, unwrapPathError(err)))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", apierr.Invalid(field, fmt.Sprintf("keyfile for %s cannot be read: %v", name, unwrapPathError(err)))
	}
	if !st.Mode().IsRegular() {
		return "", apierr.Invalid(field, fmt.Sprintf("keyfile for %s is not a regular file", name))
	}
	if st.Mode().Perm()&0o004 != 0 {
		return "", apierr.Invalid(field, fmt.Sprintf("keyfile for %s is world-readable (mode %v); chmod o-r it", name, st.Mode().Perm()))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyfileBytes+1))
	if err != nil {
		return "", apierr.Invalid(field, fmt.Sprintf("keyfile for %s cannot be read: %v", name, unwrapPathError(err)))
	}
	if len(data) > maxKeyfileBytes {
		return "", apierr.Invalid(field, fmt.Sprintf("keyfile for %s is larger than %d bytes", name, maxKeyfileBytes))
	}
	val := strings.TrimSpace(string(data))
	if val == "" {
		return "", apierr.Invalid(field, fmt.Sprintf("keyfile for %s is empty", name))
	}
	return val, nil
}

// unwrapPathError drops the path from an *os.PathError (the caller names the variable).
func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
