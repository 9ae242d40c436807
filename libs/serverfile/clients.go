package serverfile

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// The client formats (format_mcpservers.go, format_mcpyaml.go) are maps of
// name to server that differ only in how an entry is laid out. Each decodes
// its own entry type and turns it into a server; from there a server becomes
// a config, and a config becomes a server to render, the same way for all.

// server is one entry of a client format, read but not yet expanded.
type server struct {
	path, name string
	typ        string
	command    string
	hasCommand bool
	args       []string
	env        map[string]string
	url        string
	headers    map[string]string
	enabled    bool
	oauth      bool
	// Where each part is written in the file, for errors ("command" or
	// "transport.command").
	fType, fCommand, fArgs, fEnv, fURL, fHeader string
}

// clientRoot is the top of a client file, its fields by exact name: a
// client's own settings may sit beside the servers.
func clientRoot(doc document) (map[string]json.RawMessage, error) {
	var root map[string]json.RawMessage
	if kindOf(doc.data) != '{' || json.Unmarshal(doc.data, &root) != nil {
		return nil, apierr.Invalid("content", "expected a mapping with a servers or mcpServers key")
	}
	return root, nil
}

// serverMap is the map of name to server written under key; null is empty.
func serverMap(key string, raw json.RawMessage) (map[string]json.RawMessage, error) {
	var servers map[string]json.RawMessage
	if k := kindOf(raw); k != 'n' && (k != '{' || json.Unmarshal(raw, &servers) != nil) {
		return nil, apierr.Invalid(key, key+" must be a mapping of server name to server")
	}
	return servers, nil
}

// clientEntries reads the servers in name order, each one decoded (as a T)
// and turned into an entry before the next is looked at, so the error
// reported is the first in that order.
func clientEntries[T any, P interface {
	*T
	json.Unmarshaler
	server() server
}](key string, servers map[string]json.RawMessage, r *resolver) ([]Entry, error) {
	entries := make([]Entry, 0, len(servers))
	// Names are keys, so distinct, but two can make one slug ("my server",
	// "my-server", "GitHub" and "github"): the config service would refuse
	// the second with a servers[i] that is no path of this file.
	slugOf := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(servers)) {
		path := key + "." + name
		p := P(new(T))
		if err := json.Unmarshal(servers[name], p); err != nil {
			return nil, fieldAt(path, err)
		}
		s := p.server()
		s.name, s.path = name, path
		e, err := s.entry(r)
		if err != nil {
			return nil, err
		}
		if other, dup := slugOf[e.Config.Slug]; dup {
			return nil, apierr.Invalid(path, fmt.Sprintf("servers %q and %q both get the slug %s: rename one", other, name, e.Config.Slug))
		}
		slugOf[e.Config.Slug] = name
		entries = append(entries, e)
	}
	return entries, nil
}

// clientStrings are the string values of the servers' fields, skipping the
// fields Parse does not read. Shapes Parse would refuse still count:
// References also serves files that do not import yet.
func clientStrings(raw json.RawMessage, skip func(field string) bool) []string {
	var servers map[string]json.RawMessage
	if json.Unmarshal(raw, &servers) != nil {
		return nil
	}
	var out []string
	for _, s := range servers {
		var fields map[string]json.RawMessage
		if json.Unmarshal(s, &fields) != nil {
			continue
		}
		for k, v := range fields {
			if skip(k) {
				continue
			}
			if value, err := decodeValue(v); err == nil {
				out = appendStrings(out, value)
			}
		}
	}
	return out
}

// entry maps the server to a config and its secrets: npx → npm, a plain
// docker run → docker, anything else → binary exactly as written; a url →
// Streamable HTTP. Secret values move to the entry's secrets.
func (s *server) entry(r *resolver) (Entry, error) {
	at := func(f string) string { return join(s.path, f) }
	var e Entry
	cfg := &e.Config
	cfg.Name, cfg.Enabled = s.name, s.enabled

	remote := false
	switch strings.ToLower(s.typ) {
	case "":
		remote = s.url != "" && !s.hasCommand
	case "stdio":
	case "http", "streamable-http", "streamablehttp":
		remote = true
	case "sse":
		return e, apierr.Invalid(at(s.fType), "SSE transport is not supported by mcpbus: use the server's Streamable HTTP endpoint (type http)")
	default:
		return e, apierr.Invalid(at(s.fType), fmt.Sprintf("unknown transport type %q: use stdio or http", s.typ))
	}
	switch {
	case remote && s.hasCommand:
		return e, apierr.Invalid(at(s.fCommand), "a url server has no command")
	case remote && s.url == "":
		return e, apierr.Invalid(at(s.fURL), "url is required")
	case remote && len(s.env) > 0:
		return e, apierr.Invalid(at(s.fEnv), "env applies only to a server started from a command")
	case !remote && s.url != "":
		return e, apierr.Invalid(at(s.fURL), "a server started from a command has no url")
	case !remote && strings.TrimSpace(s.command) == "":
		return e, apierr.Invalid(at(s.fCommand), "command is required")
	case !remote && len(s.headers) > 0:
		return e, apierr.Invalid(at(s.fHeader), "headers apply only to a url server")
	}

	if remote {
		u, sv, err := r.expand(at(s.fURL), s.url)
		if err != nil {
			return e, err
		}
		if sv != "" {
			return e, secretOutside(at(s.fURL), sv)
		}
		if err := checkURL(at(s.fURL), u); err != nil {
			return e, err
		}
		cfg.Transport = model.Transport{Type: model.TransportHTTP, URL: u}
		if err := takeHeaders(r, at(s.fHeader), s.headers, nil, &cfg.Transport, &e.Secrets); err != nil {
			return e, err
		}
	} else {
		cmd, sv, err := r.expand(at(s.fCommand), s.command)
		if err != nil {
			return e, err
		}
		if sv != "" {
			return e, secretOutside(at(s.fCommand), sv)
		}
		args := make([]string, len(s.args))
		for i, a := range s.args {
			f := fmt.Sprintf("%s[%d]", at(s.fArgs), i)
			if args[i], sv, err = r.expand(f, a); err != nil {
				return e, err
			}
			if sv != "" {
				return e, secretOutside(f, sv)
			}
		}
		if err := checkArgs(at(s.fArgs), args); err != nil {
			return e, err
		}
		cfg.Transport = model.Transport{Type: model.TransportStdio}
		cfg.Package = classify(cmd, args, s.env)
		if err := takeEnv(r, at(s.fEnv), s.env, cfg, &e.Secrets); err != nil {
			return e, err
		}
	}
	switch {
	case s.oauth:
		cfg.AuthType = model.AuthOAuth
	case hasSecrets(cfg):
		cfg.AuthType = model.AuthAPIKey
	default:
		cfg.AuthType = model.AuthNone
	}
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return e, apierr.Invalid(s.fileField(err.Field, remote), err.Message)
	}
	if field, _, refused := inlineSecret(cfg); refused {
		// What checkURL and checkArgs let through (a password in a plain
		// argument such as postgresql://user:pw@host/db, a secret in a URL
		// fragment, docker -e NAME=value) would be refused by the sealer
		// with a config's field; here it is named where it is in the file.
		if strings.HasPrefix(field, "package.args[") || strings.HasPrefix(field, "package.runtime_args[") {
			return e, apierr.Invalid(s.argField(at(s.fArgs), field, cfg.Package), "a secret on the command line would be stored in the config: pass it in env (the server reads it from there) instead")
		}
		return e, apierr.Invalid(s.fileField(field, remote), "the URL carries a secret, which would be stored in the config: send it in a header")
	}
	return e, nil
}

// argField is where in the file the argument a config field names
// (package.args[i]) was written: a package's arguments are the end of the
// command line (classify), the runtime arguments the words before the
// identifier.
func (s *server) argField(argsPath, field string, p model.Package) string {
	n := 0
	list := p.Args
	rest, isArgs := strings.CutPrefix(field, "package.args[")
	if !isArgs {
		rest = strings.TrimPrefix(field, "package.runtime_args[")
		list = p.RuntimeArgs
	}
	if _, err := fmt.Sscanf(rest, "%d]", &n); err != nil || n >= len(list) {
		return argsPath
	}
	if isArgs {
		return fmt.Sprintf("%s[%d]", argsPath, len(s.args)-len(p.Args)+n)
	}
	if i := slices.Index(s.args, list[n]); i >= 0 {
		return fmt.Sprintf("%s[%d]", argsPath, i)
	}
	return argsPath
}

// fileField says where in the file a config validation error comes from.
func (s *server) fileField(field string, remote bool) string {
	switch {
	case field == "name" || field == "slug":
		return s.path
	case field == "package.identifier" && remote, field == "transport.url":
		return join(s.path, s.fURL)
	case field == "package.identifier":
		return join(s.path, s.fCommand)
	case field == "env_vars":
		return join(s.path, s.fEnv)
	case strings.HasPrefix(field, "env_vars."):
		return join(s.path, s.fEnv+"."+strings.TrimPrefix(field, "env_vars."))
	}
	return join(s.path, field)
}

// takeEnv moves env into the config: secret values (by the variable's name,
// or a secret reference in the value) go to secrets.
func takeEnv(r *resolver, path string, env map[string]string, cfg *model.McpConfig, secrets *model.Credentials) error {
	if len(env) == 0 {
		return nil
	}
	cfg.EnvVars = make(map[string]model.EnvVar, len(env))
	for _, name := range slices.Sorted(maps.Keys(env)) {
		val, sv, err := r.expand(join(path, name), env[name])
		if err != nil {
			return err
		}
		if sv == "" && !model.LooksSecret(name) {
			cfg.EnvVars[name] = model.EnvVar{Value: val}
			continue
		}
		// An empty secret stays required: the server cannot start until a
		// secret is set for it.
		cfg.EnvVars[name] = model.EnvVar{SecretRef: name, IsSecret: true, Required: true}
		if val != "" {
			if secrets.Env == nil {
				secrets.Env = map[string]string{}
			}
			secrets.Env[name] = val
		}
	}
	return nil
}

// takeHeaders moves headers into the transport: secret ones (by name, listed
// in alsoSecret, or with a secret reference in the value) go to secrets and
// are only named in SecretHeaders.
func takeHeaders(r *resolver, path string, headers map[string]string, alsoSecret map[string]bool, t *model.Transport, secrets *model.Credentials) error {
	t.Headers = nil
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		val, sv, err := r.expand(join(path, name), headers[name])
		if err != nil {
			return err
		}
		if err := checkHeader(join(path, name), name, val); err != nil {
			return err
		}
		if sv == "" && !model.LooksSecret(name) && !alsoSecret[name] {
			if t.Headers == nil {
				t.Headers = map[string]string{}
			}
			t.Headers[name] = val
			continue
		}
		if !slices.Contains(t.SecretHeaders, name) {
			t.SecretHeaders = append(t.SecretHeaders, name)
		}
		if val != "" {
			if secrets.Headers == nil {
				secrets.Headers = map[string]string{}
			}
			secrets.Headers[name] = val
		}
	}
	slices.Sort(t.SecretHeaders)
	return nil
}

// clientServer is the server a client format writes for c: the command line
// the runner runs, or the url; secrets as placeholders; literal ${ escaped.
func clientServer(c model.McpConfig) (server, error) {
	s := server{enabled: c.Enabled, oauth: c.AuthType == model.AuthOAuth}
	if c.Transport.Type == model.TransportHTTP {
		s.typ, s.url = model.TransportHTTP, escape(c.Transport.URL)
		s.headers, _ = renderHeaders(escapeTransport(c.Transport))
		return s, nil
	}
	s.typ = model.TransportStdio
	var err error
	if s.command, s.args, err = commandLine(c); err != nil {
		return server{}, err
	}
	s.env = renderEnv(c.EnvVars)
	return s, nil
}

// clientServers are the configs as the servers map of a client format, each
// server laid out by as.
func clientServers[T any](configs []model.McpConfig, as func(server) T) (map[string]T, error) {
	keys, err := entryNames(configs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]T, len(configs))
	for i, c := range configs {
		s, err := clientServer(c)
		if err != nil {
			return nil, err
		}
		out[keys[i]] = as(s)
	}
	return out, nil
}
