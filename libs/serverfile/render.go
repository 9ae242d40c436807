package serverfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// renderNative writes {"servers": [...]} without the fields the config
// service owns (id, revision, timestamps), so the file imports anywhere.
func renderNative(configs []model.McpConfig) ([]byte, error) {
	out := struct {
		Servers []exported `json:"servers"`
	}{Servers: make([]exported, 0, len(configs))}
	for _, c := range configs {
		// A deep copy: escaping and placeholders must not touch the caller's slices and maps.
		data, err := json.Marshal(c)
		if err != nil {
			return nil, apierr.Wrap(apierr.Internal, "encoding config "+c.Slug, err)
		}
		var cp model.McpConfig
		if err := json.Unmarshal(data, &cp); err != nil {
			return nil, apierr.Wrap(apierr.Internal, "copying config "+c.Slug, err)
		}
		cp.ID, cp.Revision, cp.CreatedAt, cp.UpdatedAt = "", 0, time.Time{}, time.Time{}
		escapeValue(reflect.ValueOf(&cp).Elem())
		for name, v := range cp.EnvVars {
			if secretEnv(name, v) && (v.KeyfilePath == "" || v.Value != "") {
				v.Value = placeholder(name, false, v.Required || v.Value != "")
				cp.EnvVars[name] = v
			}
		}
		headers, secretHeaders := renderHeaders(cp.Transport)
		cp.Transport.Headers, cp.Transport.SecretHeaders = headers, secretHeaders
		out.Servers = append(out.Servers, exported{McpConfig: cp})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, apierr.Wrap(apierr.Internal, "encoding servers file", err)
	}
	return buf.Bytes(), nil
}

// exported is a config without its id: the shallower, omitted ID hides the
// embedded one (revision and timestamps are omitted when zero already).
type exported struct {
	ID string `json:"id,omitempty"`
	model.McpConfig
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

type mcpServersFile struct {
	MCPServers map[string]mcpServer `json:"mcpServers"`
}

type mcpServer struct {
	Command  string            `json:"command,omitempty"`
	Args     []string          `json:"args,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	URL      string            `json:"url,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	Type     string            `json:"type,omitempty"`
	Disabled bool              `json:"disabled,omitempty"`
}

func renderMCPServers(configs []model.McpConfig) ([]byte, error) {
	keys, err := entryNames(configs)
	if err != nil {
		return nil, err
	}
	out := mcpServersFile{MCPServers: map[string]mcpServer{}}
	for i, c := range configs {
		var s mcpServer
		if c.Transport.Type == model.TransportHTTP {
			s.URL, s.Type = escape(c.Transport.URL), "http"
			s.Headers, _ = renderHeaders(escapeTransport(c.Transport))
		} else {
			if s.Command, s.Args, err = commandLine(c); err != nil {
				return nil, err
			}
			s.Env = renderEnv(c.EnvVars)
		}
		s.Disabled = !c.Enabled
		out.MCPServers[keys[i]] = s
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, apierr.Wrap(apierr.Internal, "encoding mcpServers file", err)
	}
	return buf.Bytes(), nil
}

type yamlFile struct {
	Servers map[string]yamlServer `yaml:"servers"`
}

type yamlServer struct {
	Transport yamlTransport     `yaml:"transport"`
	Env       map[string]string `yaml:"env,omitempty"`
	OAuth     *struct{}         `yaml:"oauth,omitempty"`
	Enabled   bool              `yaml:"enabled"`
}

type yamlTransport struct {
	Type    string            `yaml:"type"`
	Command string            `yaml:"command,omitempty"`
	Args    []string          `yaml:"args,omitempty"`
	URL     string            `yaml:"url,omitempty"`
	Headers map[string]string `yaml:"headers,omitempty"`
}

// renderMCPYAML writes the seeds/003 shape. An OAuth server gets an empty
// oauth block: its token and client live in the credential service.
func renderMCPYAML(configs []model.McpConfig) ([]byte, error) {
	keys, err := entryNames(configs)
	if err != nil {
		return nil, err
	}
	out := yamlFile{Servers: map[string]yamlServer{}}
	for i, c := range configs {
		s := yamlServer{Enabled: c.Enabled}
		if c.Transport.Type == model.TransportHTTP {
			s.Transport = yamlTransport{Type: model.TransportHTTP, URL: escape(c.Transport.URL)}
			s.Transport.Headers, _ = renderHeaders(escapeTransport(c.Transport))
		} else {
			s.Transport.Type = model.TransportStdio
			if s.Transport.Command, s.Transport.Args, err = commandLine(c); err != nil {
				return nil, err
			}
			s.Env = renderEnv(c.EnvVars)
		}
		if c.AuthType == model.AuthOAuth {
			s.OAuth = &struct{}{}
		}
		out.Servers[keys[i]] = s
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(out); err != nil {
		return nil, apierr.Wrap(apierr.Internal, "encoding mcp.yaml", err)
	}
	if err := enc.Close(); err != nil {
		return nil, apierr.Wrap(apierr.Internal, "encoding mcp.yaml", err)
	}
	return buf.Bytes(), nil
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

// commandLine is the command a client runs for a stdio config: what the
// runner runs (npx -y, docker run -i --rm -e NAME…, or the binary as is).
func commandLine(c model.McpConfig) (string, []string, error) {
	p := c.Package
	var cmd string
	var args []string
	switch p.Type {
	case model.PackageNPM:
		cmd = "npx"
		if p.RuntimeHint != "" && p.RuntimeHint != "npx" && p.RuntimeHint != "node" {
			cmd = p.RuntimeHint
		}
		args = append(append(append([]string{"-y"}, p.RuntimeArgs...), p.Identifier), p.Args...)
	case model.PackageDocker:
		args = []string{"run", "-i", "--rm"}
		for _, name := range slices.Sorted(maps.Keys(c.EnvVars)) {
			args = append(args, "-e", name)
		}
		args = append(args, p.RuntimeArgs...)
		cmd, args = "docker", append(append(args, p.Identifier), p.Args...)
	case model.PackageBinary:
		cmd, args = p.Identifier, slices.Clone(p.Args)
	default:
		return "", nil, apierr.Invalid("package.type", fmt.Sprintf("server %s: a stdio server needs package type npm, docker or binary", c.Slug))
	}
	for i := range args {
		args[i] = escape(args[i])
	}
	return escape(cmd), args, nil
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

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// escapeValue escapes every string value (not map keys, which are never
// expanded) held by v, so literal ${ survives the re-import.
func escapeValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(escape(v.String()))
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				escapeValue(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type() == rawMessageType {
			v.SetBytes(escapeJSON(v.Bytes()))
			return
		}
		for i := range v.Len() {
			escapeValue(v.Index(i))
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(iter.Value())
			escapeValue(e)
			v.SetMapIndex(iter.Key(), e)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			escapeValue(v.Elem())
		}
	}
}

// escapeJSON escapes the string values of free JSON (the config block).
func escapeJSON(raw []byte) []byte {
	if len(raw) == 0 || !bytes.Contains(raw, []byte("${")) {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	var walk func(any) any
	walk = func(v any) any {
		switch t := v.(type) {
		case string:
			return escape(t)
		case map[string]any:
			for k, x := range t {
				t[k] = walk(x)
			}
		case []any:
			for i, x := range t {
				t[i] = walk(x)
			}
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return raw
	}
	return out
}
