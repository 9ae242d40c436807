package credential

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"

	"golang.org/x/net/http/httpguts"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Limits of what one record may hold.
const (
	maxValueBytes = 64 << 10
	maxNameBytes  = 256
)

// fieldOf names a map entry in an error; a name that is not printable is
// left out (the field is echoed to callers and logs).
func fieldOf(prefix, name string) string {
	if name == "" || len(name) > maxNameBytes || strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return prefix
	}
	return prefix + "." + name
}

// validateEnvName checks the name of an environment variable.
func validateEnvName(field, name string) *apierr.Error {
	switch {
	case name == "":
		return apierr.Invalid(field, "an environment variable name is empty")
	case len(name) > maxNameBytes:
		return apierr.Invalid(field, fmt.Sprintf("environment variable name is longer than %d bytes", maxNameBytes))
	case strings.ContainsAny(name, "=\x00"):
		return apierr.Invalid(field, fmt.Sprintf("environment variable name %q must not contain '=' or NUL", name))
	}
	return nil
}

// validateHeaderName checks an HTTP header name (an RFC 9110 token).
func validateHeaderName(field, name string) *apierr.Error {
	switch {
	case name == "":
		return apierr.Invalid(field, "a header name is empty")
	case len(name) > maxNameBytes:
		return apierr.Invalid(field, fmt.Sprintf("header name is longer than %d bytes", maxNameBytes))
	case !httpguts.ValidHeaderFieldName(name):
		return apierr.Invalid(field, fmt.Sprintf("header name %q is not a valid HTTP header name", name))
	}
	return nil
}

// validateValue checks a secret value without ever quoting it.
func validateValue(field, what string, v string, header bool) *apierr.Error {
	switch {
	case v == "":
		return apierr.Invalid(field, what+" is empty")
	case len(v) > maxValueBytes:
		return apierr.Invalid(field, fmt.Sprintf("%s is longer than %d bytes", what, maxValueBytes))
	case strings.ContainsRune(v, 0):
		return apierr.Invalid(field, what+" contains a NUL byte")
	case header && !httpguts.ValidHeaderFieldValue(v):
		return apierr.Invalid(field, what+" is not a valid HTTP header value (control characters or line breaks)")
	}
	return nil
}

// validateKeyfile checks a keyfile path: absolute, an existing regular file
// that others cannot read (the runner refuses a world-readable key as well).
func validateKeyfile(field, name, path string) *apierr.Error {
	if path == "" {
		return apierr.Invalid(field, fmt.Sprintf("keyfile path for %s is empty", name))
	}
	if len(path) > 4096 || strings.ContainsRune(path, 0) {
		return apierr.Invalid(field, fmt.Sprintf("keyfile path for %s is not a valid path", name))
	}
	if !filepath.IsAbs(path) {
		return apierr.Invalid(field, fmt.Sprintf("keyfile path for %s must be absolute", name))
	}
	st, err := os.Stat(path)
	if err != nil {
		if os.IsNotExist(err) {
			return apierr.Invalid(field, fmt.Sprintf("keyfile %s does not exist", path))
		}
		return apierr.Invalid(field, fmt.Sprintf("keyfile %s cannot be read: %v", path, pathErr(err)))
	}
	if !st.Mode().IsRegular() {
		return apierr.Invalid(field, fmt.Sprintf("keyfile %s is not a regular file", path))
	}
	if st.Mode().Perm()&0o004 != 0 {
		return apierr.Invalid(field, fmt.Sprintf("keyfile %s is readable by everyone (mode %04o); restrict it with chmod 600 %s", path, st.Mode().Perm(), path))
	}
	return nil
}

// pathErr drops the path from an *os.PathError (the message already names it).
func pathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// validateCredentials checks what a set request brings. Names are checked in
// sorted order so the same bad input always reports the same field.
func validateCredentials(c model.Credentials) *apierr.Error {
	if c.Owner != "" {
		return apierr.Invalid("credentials.owner", "owner is the credential service's own (give for on a principal's record)")
	}
	for _, name := range sortedKeys(c.Env) {
		f := fieldOf("credentials.env", name)
		if e := validateEnvName(f, name); e != nil {
			return e
		}
		if e := validateValue(f, "the value of "+name, c.Env[name], false); e != nil {
			return e
		}
		if _, dup := c.Keyfiles[name]; dup {
			return apierr.Invalid(f, fmt.Sprintf("%s is given both as a value and as a keyfile", name))
		}
	}
	for _, name := range sortedKeys(c.Headers) {
		f := fieldOf("credentials.headers", name)
		if e := validateHeaderName(f, name); e != nil {
			return e
		}
		if e := validateValue(f, "the value of header "+name, c.Headers[name], true); e != nil {
			return e
		}
	}
	for _, name := range sortedKeys(c.Keyfiles) {
		f := fieldOf("credentials.keyfiles", name)
		if e := validateEnvName(f, name); e != nil {
			return e
		}
		if e := validateKeyfile(f, name, c.Keyfiles[name]); e != nil {
			return e
		}
	}
	if c.OAuth != nil {
		return validateOAuth(c.OAuth)
	}
	return nil
}

func validateOAuth(o *model.OAuthToken) *apierr.Error {
	const f = "credentials.oauth"
	if o.AccessToken == "" {
		return apierr.Invalid(f+".access_token", "an OAuth token needs its access_token")
	}
	if e := validateValue(f+".access_token", "the access token", o.AccessToken, true); e != nil {
		return e
	}
	if o.RefreshToken != "" {
		if e := validateValue(f+".refresh_token", "the refresh token", o.RefreshToken, true); e != nil {
			return e
		}
	}
	if len(o.ClientSecret) > maxValueBytes || len(o.ClientID) > maxValueBytes {
		return apierr.Invalid(f, "client_id or client_secret is too long")
	}
	if o.EnvVar == "" && o.Header == "" {
		return apierr.Invalid(f, "an OAuth token needs env_var or header (where the access token goes)")
	}
	if o.EnvVar != "" {
		if e := validateEnvName(f+".env_var", o.EnvVar); e != nil {
			return e
		}
	}
	if o.Header != "" {
		if e := validateHeaderName(f+".header", o.Header); e != nil {
			return e
		}
	}
	if o.TokenURL != "" {
		u, err := url.Parse(o.TokenURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return apierr.Invalid(f+".token_url", "token_url must be an absolute http(s) URL")
		}
		if u.User != nil {
			return apierr.Invalid(f+".token_url", "token_url must not carry user info; use client_id and client_secret")
		}
	}
	return nil
}

// checkRecord rejects a merged record where two sources feed the same
// variable or header, which would make the result depend on the order of
// resolution.
func checkRecord(c model.Credentials) *apierr.Error {
	if c.OAuth == nil {
		return nil
	}
	if n := c.OAuth.EnvVar; n != "" {
		if _, ok := c.Env[n]; ok {
			return apierr.Invalid("credentials.oauth.env_var", fmt.Sprintf("%s already holds a stored value; delete it first", n))
		}
		if _, ok := c.Keyfiles[n]; ok {
			return apierr.Invalid("credentials.oauth.env_var", fmt.Sprintf("%s already holds a keyfile; delete it first", n))
		}
	}
	if h := c.OAuth.Header; h != "" {
		for name := range c.Headers {
			if strings.EqualFold(name, h) {
				return apierr.Invalid("credentials.oauth.header", fmt.Sprintf("header %s already holds a stored value; delete it first", name))
			}
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
