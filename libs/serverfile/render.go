package serverfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// What every format's Render shares: secrets written as ${VAR} placeholders,
// literal ${ escaped, the names of the map formats' entries.

var envNameChars = regexp.MustCompile(`[^A-Za-z0-9_]`)

// placeholder is the ${VAR} an export writes for a secret env var or header.
func placeholder(name string, header, required bool) string {
	v := name
	if header {
		v = strings.ToUpper(v)
	}
	v = envNameChars.ReplaceAllString(v, "_")
	if v == "" || v[0] >= '0' && v[0] <= '9' {
		v = "_" + v
	}
	if !model.LooksSecret(v) {
		v += "_SECRET"
	}
	if !required {
		return "${" + v + ":-}" // an optional secret may stay unset
	}
	return "${" + v + "}"
}

// secretEnv reports whether an env var's value must not be written.
func secretEnv(name string, v model.EnvVar) bool {
	return v.IsSecret || v.SecretRef != "" || v.KeyfilePath != "" || model.LooksSecret(name) && v.Value != ""
}

// renderHeaders gives the headers to write (plain values escaped by the
// caller, secret ones as placeholders) and the names of the secret ones.
func renderHeaders(t model.Transport) (map[string]string, []string) {
	var secret []string
	out := map[string]string{}
	for name, val := range t.Headers {
		if model.LooksSecret(name) {
			secret = append(secret, name)
			continue
		}
		out[name] = val
	}
	secret = append(secret, t.SecretHeaders...)
	slices.Sort(secret)
	secret = slices.Compact(secret)
	for _, name := range secret {
		out[name] = placeholder(name, true, true)
	}
	if len(out) == 0 {
		out = nil
	}
	return out, secret
}

func renderEnv(vars map[string]model.EnvVar) map[string]string {
	if len(vars) == 0 {
		return nil
	}
	out := make(map[string]string, len(vars))
	for name, v := range vars {
		if secretEnv(name, v) {
			// A keyfile cannot be written in these formats: its value is asked for instead.
			out[name] = placeholder(name, false, v.Required || v.Value != "" || v.KeyfilePath != "")
			continue
		}
		out[name] = escape(v.Value)
	}
	return out
}

func escapeTransport(t model.Transport) model.Transport {
	h := make(map[string]string, len(t.Headers))
	for k, v := range t.Headers {
		h[k] = escape(v)
	}
	t.Headers = h
	return t
}

// entryNames are the map keys of the configs: the name (it becomes the name
// again on import), or the slug when two configs share a name.
func entryNames(configs []model.McpConfig) ([]string, error) {
	keys := make([]string, len(configs))
	used := map[string]bool{}
	for i, c := range configs {
		k := c.Name
		if k == "" || used[k] {
			k = c.Slug
		}
		if k == "" || used[k] {
			return nil, apierr.Invalid(fmt.Sprintf("configs[%d].name", i), fmt.Sprintf("two servers are both named %q", k))
		}
		used[k] = true
		keys[i] = k
	}
	return keys, nil
}

// encodeJSON writes v indented, with < > & as they are: the file is for
// people, not for HTML.
func encodeJSON(v any, what string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, apierr.Wrap(apierr.Internal, "encoding "+what, err)
	}
	return buf.Bytes(), nil
}
