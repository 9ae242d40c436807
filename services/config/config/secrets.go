package config

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// extractSecrets moves every secret value out of cfg: env vars marked
// is_secret (or named like a secret) that carry a value, and transport
// headers named like a secret. It returns them merged with given (which wins
// on a clash: it is the explicit channel for secrets). A secret env var keeps
// only its reference (secret_ref = where the value is stored).
func extractSecrets(cfg *model.McpConfig, given *model.Credentials) model.Credentials {
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
			secret := v.IsSecret || model.LooksSecret(name)
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

// credsHave reports whether c holds a secret for env var name.
func credsHave(c model.Credentials, name string) bool {
	if _, ok := c.Env[name]; ok {
		return true
	}
	if _, ok := c.Keyfiles[name]; ok {
		return true
	}
	return c.OAuth != nil && c.OAuth.EnvVar == name
}

// missingSecret is the required-secret rule: a required secret env var whose
// secret is neither given now nor already stored blocks the save.
func missingSecret(cfg *model.McpConfig, secrets model.Credentials, stored *model.CredDescription) *apierr.Error {
	for _, name := range slices.Sorted(maps.Keys(cfg.EnvVars)) {
		v := cfg.EnvVars[name]
		if !v.Required || v.Value != "" || v.KeyfilePath != "" || v.SecretRef == "" {
			continue // plain values are Validate's job
		}
		if credsHave(secrets, v.SecretRef) || (stored != nil && stored.Has(v.SecretRef)) {
			continue
		}
		return apierr.Invalid("env_vars."+name, "Missing required credentials")
	}
	return nil
}

// needsStored reports whether the required check must ask the credential
// service what it already holds.
func needsStored(cfg *model.McpConfig, secrets model.Credentials) bool {
	for _, v := range cfg.EnvVars {
		if v.Required && v.Value == "" && v.KeyfilePath == "" && v.SecretRef != "" && !credsHave(secrets, v.SecretRef) {
			return true
		}
	}
	return false
}

// checkKeyfiles applies the keyfile rules on this host: the
// file exists, is regular and others cannot read it.
func checkKeyfiles(cfg *model.McpConfig, secrets model.Credentials) *apierr.Error {
	for _, name := range slices.Sorted(maps.Keys(cfg.EnvVars)) {
		if p := cfg.EnvVars[name].KeyfilePath; p != "" {
			if err := checkKeyfile("env_vars."+name+".keyfile_path", p); err != nil {
				return err
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(secrets.Keyfiles)) {
		if err := checkKeyfile("secrets.keyfiles."+name, secrets.Keyfiles[name]); err != nil {
			return err
		}
	}
	return nil
}

func checkKeyfile(field, path string) *apierr.Error {
	if !filepath.IsAbs(path) {
		return apierr.Invalid(field, fmt.Sprintf("keyfile path %s must be absolute", path))
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return apierr.Invalid(field, fmt.Sprintf("keyfile %s does not exist", path))
	case err != nil:
		return apierr.Invalid(field, fmt.Sprintf("keyfile %s cannot be read: %v", path, errors.Unwrap(err)))
	case !st.Mode().IsRegular():
		return apierr.Invalid(field, fmt.Sprintf("keyfile %s is not a regular file", path))
	case st.Mode().Perm()&0o004 != 0:
		return apierr.Invalid(field, fmt.Sprintf("keyfile %s is readable by everyone (mode %04o); chmod o-r it", path, st.Mode().Perm()))
	}
	return nil
}

// newSecretNames lists what secrets adds to what stored holds (the names an
// undo deletes again).
func newSecretNames(secrets model.Credentials, stored *model.CredDescription) []string {
	var names []string
	has := func(list []string, n string) bool { return stored != nil && slices.Contains(list, n) }
	for _, n := range slices.Sorted(maps.Keys(secrets.Env)) {
		if stored == nil || !has(stored.Env, n) {
			names = append(names, n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(secrets.Headers)) {
		if stored == nil || !has(stored.Headers, n) {
			names = append(names, n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(secrets.Keyfiles)) {
		if stored == nil || !has(stored.Keyfiles, n) {
			names = append(names, n)
		}
	}
	if secrets.OAuth != nil && (stored == nil || stored.OAuth == nil) {
		names = append(names, "oauth")
	}
	return names
}

// credErr maps a failed credential request: an absent or silent credential
// service is SERVICE_UNAVAILABLE; its own answers (validation…) pass through.
func credErr(verb string, err error) error {
	switch apierr.Of(err) {
	case apierr.ServiceUnavailable:
		return apierr.Wrap(apierr.ServiceUnavailable, "credential service is not available ("+verb+")", err)
	case apierr.Network:
		return apierr.Wrap(apierr.ServiceUnavailable, "credential service did not answer ("+verb+")", err)
	}
	return err
}

func (s *Service) credSet(ctx context.Context, id string, c model.Credentials) error {
	var out model.CredDescription
	err := bus.RequestJSON(ctx, s.nc, s.subj.Service("cred", "set"),
		model.CredSetRequest{ServerID: id, Credentials: c}, &out, s.opts.RequestTimeout)
	if err != nil {
		return credErr("set", err)
	}
	return nil
}

// credDelete removes the named secrets of id, or all of them with no names.
// A server with no stored secrets is not an error.
func (s *Service) credDelete(ctx context.Context, id string, names []string) error {
	err := bus.RequestJSON(ctx, s.nc, s.subj.Service("cred", "delete"),
		model.CredDeleteRequest{ServerID: id, Names: names}, nil, s.opts.RequestTimeout)
	if err != nil && apierr.Of(err) != apierr.NotFound {
		return credErr("delete", err)
	}
	return nil
}

// credDescribe says which secrets id has (an empty description when none).
func (s *Service) credDescribe(ctx context.Context, id string) (*model.CredDescription, error) {
	var out model.CredDescription
	err := bus.RequestJSON(ctx, s.nc, s.subj.Service("cred", "describe"),
		model.CredDescribeRequest{ServerID: id}, &out, s.opts.RequestTimeout)
	if apierr.Of(err) == apierr.NotFound {
		return &model.CredDescription{ServerID: id}, nil
	}
	if err != nil {
		return nil, credErr("describe", err)
	}
	return &out, nil
}
