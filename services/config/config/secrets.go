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
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
)

// extractSecrets moves every secret value out of cfg (as the writers do
// before they seal them: credclient.ExtractSecrets) and returns them.
func extractSecrets(cfg *model.McpConfig, given *model.Credentials) model.Credentials {
	return credclient.ExtractSecrets(cfg, given)
}

// refuseClear refuses secret values that came in clear: the secrets field,
// or values still in the config (env vars marked or named secret, secret
// headers). They crossed the bus readable by anyone on it; writers seal them
// to the credential service's key instead (libs/client does). What is left is
// normalised as before (secret references, secret_headers).
func refuseClear(cfg *model.McpConfig, given *model.Credentials, keySubject string) *apierr.Error {
	if given != nil && !given.Empty() {
		return credclient.ClearRefused("secrets", keySubject)
	}
	leaked := extractSecrets(cfg, nil)
	if refs := slices.Sorted(maps.Keys(leaked.Env)); len(refs) > 0 {
		for _, envName := range slices.Sorted(maps.Keys(cfg.EnvVars)) {
			if cfg.EnvVars[envName].SecretRef == refs[0] {
				return credclient.ClearRefused("env_vars."+envName+".value", keySubject)
			}
		}
		return credclient.ClearRefused("env_vars", keySubject)
	}
	if headers := slices.Sorted(maps.Keys(leaked.Headers)); len(headers) > 0 {
		return credclient.ClearRefused("transport.headers."+headers[0], keySubject)
	}
	return nil
}

// sealedNames checks the sealed secrets of a request (all three parts or
// none) and returns the names they hold; their headers join the config's
// secret_headers (an export writes them as ${VAR} placeholders).
func sealedNames(cfg *model.McpConfig, sealed model.SealedSecrets) (model.SecretNames, *apierr.Error) {
	if sealed.IsZero() {
		return model.SecretNames{}, nil
	}
	switch {
	case len(sealed.Sealed) == 0:
		return model.SecretNames{}, apierr.Invalid(credclient.FieldSealedConfig, "sealed_secrets is required with sender_key and secret_names")
	case sealed.SenderKey == "":
		return model.SecretNames{}, apierr.Invalid("sender_key", "sender_key is required with sealed_secrets")
	case sealed.Names == nil || sealed.Names.Empty():
		return model.SecretNames{}, apierr.Invalid("secret_names", "secret_names must name what sealed_secrets holds")
	case len(sealed.Sealed) > credclient.MaxSealed:
		return model.SecretNames{}, apierr.Invalid(credclient.FieldSealedConfig, fmt.Sprintf("sealed_secrets is longer than %d bytes", credclient.MaxSealed))
	}
	names := *sealed.Names
	known := map[string]bool{}
	for _, n := range cfg.Transport.SecretHeaders {
		known[http.CanonicalHeaderKey(n)] = true
	}
	for _, n := range names.Headers {
		if !known[http.CanonicalHeaderKey(n)] {
			known[http.CanonicalHeaderKey(n)] = true
			cfg.Transport.SecretHeaders = append(cfg.Transport.SecretHeaders, n)
		}
	}
	slices.Sort(cfg.Transport.SecretHeaders)
	return names, nil
}

// credsHave reports whether c names a secret for env var name.
func credsHave(c model.SecretNames, name string) bool {
	return slices.Contains(c.Env, name) || slices.Contains(c.Keyfiles, name) || (c.OAuth != nil && c.OAuth.EnvVar == name)
}

// missingSecret is the required-secret rule: a required secret env var whose
// secret is neither given now nor already stored blocks the save.
func missingSecret(cfg *model.McpConfig, secrets model.SecretNames, stored *model.CredDescription) *apierr.Error {
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
func needsStored(cfg *model.McpConfig, secrets model.SecretNames) bool {
	for _, v := range cfg.EnvVars {
		if v.Required && v.Value == "" && v.KeyfilePath == "" && v.SecretRef != "" && !credsHave(secrets, v.SecretRef) {
			return true
		}
	}
	return false
}

// checkKeyfiles applies the keyfile rules on this host to the config's
// keyfile paths: the file exists, is regular and others cannot read it.
// Keyfiles that come sealed are checked by the credential service.
func checkKeyfiles(cfg *model.McpConfig) *apierr.Error {
	for _, name := range slices.Sorted(maps.Keys(cfg.EnvVars)) {
		if p := cfg.EnvVars[name].KeyfilePath; p != "" {
			if err := checkKeyfile("env_vars."+name+".keyfile_path", p); err != nil {
				return err
			}
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
func newSecretNames(secrets model.SecretNames, stored *model.CredDescription) []string {
	var names []string
	has := func(list []string, n string) bool { return stored != nil && slices.Contains(list, n) }
	for _, n := range slices.Sorted(slices.Values(secrets.Env)) {
		if stored == nil || !has(stored.Env, n) {
			names = append(names, n)
		}
	}
	for _, n := range slices.Sorted(slices.Values(secrets.Headers)) {
		if stored == nil || !has(stored.Headers, n) {
			names = append(names, n)
		}
	}
	for _, n := range slices.Sorted(slices.Values(secrets.Keyfiles)) {
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

// credRequest asks the credential service within RequestTimeout (bus.Request
// applies its timeout only to a context without a deadline, and a request's
// has one: a silent credential service took all of OpTimeout).
func (s *Service) credRequest(ctx context.Context, verb string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	return bus.RequestJSON(ctx, s.nc, s.subj.Service("cred", verb), in, out, 0)
}

// credSet hands the sealed secrets of id to the credential service as they
// came (the config service cannot open them); dryRun only checks them.
func (s *Service) credSet(ctx context.Context, id string, sealed model.SealedSecrets, dryRun bool) error {
	var out model.CredDescription
	err := s.credRequest(ctx, "set",
		model.CredSetRequest{ServerID: id, Sealed: sealed.Sealed, SenderKey: sealed.SenderKey, Names: sealed.Names, DryRun: dryRun}, &out)
	if err != nil {
		return sealedField(credErr("set", err))
	}
	return nil
}

// sealedField names the fields of a refused cred.set as the config request
// has them (sealed → sealed_secrets, names → secret_names, credentials.* →
// secrets.*).
func sealedField(err error) error {
	var e *apierr.Error
	if !errors.As(err, &e) || e.Code != apierr.Validation {
		return err
	}
	switch f := e.Field; {
	case f == credclient.FieldSealed:
		return e.WithField(credclient.FieldSealedConfig)
	case f == "names":
		return e.WithField("secret_names")
	case f == "credentials" || strings.HasPrefix(f, "credentials."):
		return e.WithField("secrets" + strings.TrimPrefix(f, "credentials"))
	}
	return err
}

// credDelete removes the named secrets of id, or all of them with no names:
// then, the server being deleted, its principals' own records too. A server
// with no stored secrets is not an error.
func (s *Service) credDelete(ctx context.Context, id string, names []string) error {
	err := s.credRequest(ctx, "delete", model.CredDeleteRequest{ServerID: id, Names: names, Principals: len(names) == 0}, nil)
	if err == nil || apierr.Of(err) == apierr.NotFound {
		return nil
	}
	// The credential service's own answer says how far the delete got (one
	// that stopped partway asks for it to be run again): keep it.
	e := apierr.From(credErr("delete", err))
	if cause := apierr.From(err).Message; cause != e.Message {
		return apierr.Wrap(e.Code, e.Message+": "+cause, err).WithField(e.Field)
	}
	return e
}

// credDescribe says which secrets id has (an empty description when none).
func (s *Service) credDescribe(ctx context.Context, id string) (*model.CredDescription, error) {
	var out model.CredDescription
	err := s.credRequest(ctx, "describe", model.CredDescribeRequest{ServerID: id}, &out)
	if apierr.Of(err) == apierr.NotFound {
		return &model.CredDescription{ServerID: id}, nil
	}
	if err != nil {
		return nil, credErr("describe", err)
	}
	return &out, nil
}
