package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// UsesCredentials reports whether starting c asks the credential service for
// its secrets: its auth type keeps secrets there, or it declares a secret
// variable or header. A server that does not never sees a stored secret.
func (c *McpConfig) UsesCredentials() bool {
	if (c.AuthType != "" && c.AuthType != AuthNone) || len(c.Transport.SecretHeaders) > 0 {
		return true
	}
	for _, v := range c.EnvVars {
		if v.StoredSecret() != "" {
			return true
		}
	}
	return false
}

// StoredSecret is the name under which v's value is kept in the credential
// service ("" when v carries its own value or a keyfile path): its SecretRef,
// else its own name (SecretByName) when it is a secret without a value.
func (v EnvVar) StoredSecret() string {
	switch {
	case v.SecretRef != "":
		return v.SecretRef
	case v.IsSecret && v.Value == "" && v.KeyfilePath == "":
		return SecretByName
	}
	return ""
}

// SecretByName is StoredSecret's answer for a secret variable without an
// explicit reference: its secret is stored under the variable's own name.
const SecretByName = "\x00name"

// secretEnvNames are the names under which c's declared secret variables are
// stored, sorted.
func (c *McpConfig) secretEnvNames() []string {
	var names []string
	for name, v := range c.EnvVars {
		switch ref := v.StoredSecret(); ref {
		case "":
		case SecretByName:
			names = append(names, name)
		default:
			names = append(names, ref)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// CheckCredentialsUsed refuses secrets that starting c would never hand to
// the server, so storing one never claims an effect it does not have:
// VALIDATION_ERROR on the secret's field, naming what c declares. The rules
// follow the runner (services/runner/runner/env.go): a server that does not
// use credentials gets none; env secrets go to stdio servers, headers to HTTP
// ones; when c declares secret variables (headers), a secret must be one of
// them; a server whose auth type keeps secrets but declares none takes any
// name (the variable is set as named).
func (c *McpConfig) CheckCredentialsUsed(creds Credentials) *apierr.Error {
	if creds.Empty() {
		return nil
	}
	if !c.UsesCredentials() {
		field := firstField(creds)
		how := "--secret-env " + strings.TrimPrefix(strings.TrimPrefix(field, "env."), "keyfiles.")
		if name, ok := strings.CutPrefix(field, "headers."); ok {
			how = "--secret-header " + name
		} else if field == "oauth" {
			// An OAuth token is declared by the auth type, which no edit
			// flag sets (a --secret-env would not take the token either).
			return apierr.Invalid(field, fmt.Sprintf(
				"server %s declares no secret (auth_type %s, no secret variable or header), so a stored OAuth token would never reach it: set auth_type: oauth in its config first (mcpbus servers get %s > %s.json, set \"auth_type\": \"oauth\", mcpbus servers edit %s -f %s.json)",
				c.Slug, orNone(c.AuthType), c.Slug, c.Slug, c.Slug, c.Slug))
		}
		return apierr.Invalid(field, fmt.Sprintf(
			"server %s declares no secret (auth_type %s, no secret variable or header), so a stored secret would never reach it: declare it in its config first (mcpbus servers edit %s %s declares it and stores the value)",
			c.Slug, orNone(c.AuthType), c.Slug, how))
	}
	remote := c.Transport.Type == TransportHTTP
	envField := func(name string) *apierr.Error {
		if remote {
			return apierr.Invalid("env."+name, fmt.Sprintf("server %s is a remote (http) server: environment variables never reach it; store headers instead", c.Slug))
		}
		declared := c.secretEnvNames()
		if len(declared) > 0 && !slices.Contains(declared, name) {
			return apierr.Invalid("env."+name, fmt.Sprintf("%s is not a secret variable of server %s (it declares %s): a secret under another name would not be used",
				name, c.Slug, strings.Join(declared, ", ")))
		}
		return nil
	}
	for _, name := range sortedKeys(creds.Env) {
		if err := envField(name); err != nil {
			return err
		}
	}
	for _, name := range sortedKeys(creds.Keyfiles) {
		if err := envField(name); err != nil {
			return err.WithField("keyfiles." + name)
		}
	}
	for _, name := range sortedKeys(creds.Headers) {
		if !remote {
			return apierr.Invalid("headers."+name, fmt.Sprintf("server %s runs on stdio: HTTP headers never reach it; store environment variables instead", c.Slug))
		}
		declared := c.Transport.SecretHeaders
		if len(declared) > 0 && !slices.ContainsFunc(declared, func(h string) bool { return strings.EqualFold(h, name) }) {
			return apierr.Invalid("headers."+name, fmt.Sprintf("%s is not a secret header of server %s (it declares %s): a secret under another name would not be used",
				name, c.Slug, strings.Join(declared, ", ")))
		}
	}
	return nil
}

func firstField(creds Credentials) string {
	switch {
	case len(creds.Env) > 0:
		return "env." + sortedKeys(creds.Env)[0]
	case len(creds.Keyfiles) > 0:
		return "keyfiles." + sortedKeys(creds.Keyfiles)[0]
	case len(creds.Headers) > 0:
		return "headers." + sortedKeys(creds.Headers)[0]
	}
	return "oauth"
}

func orNone(s string) string {
	if s == "" {
		return AuthNone
	}
	return s
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
