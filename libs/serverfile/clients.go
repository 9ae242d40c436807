package serverfile

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// style is one of the map formats: where the servers are and how an entry looks.
type style int

const (
	// styleMCPServers: {"mcpServers": {name: {command, args, env | url, headers, type}}}
	// (Claude Desktop, Cursor, Claude Code) or VS Code's {"servers": {…}, "inputs": […]}.
	styleMCPServers style = iota
	// styleMCPYAML: servers: {name: {transport: {type, command, args | url, headers}, env, enabled, oauth}}.
	styleMCPYAML
)

// server is one entry of a map format, read but not yet expanded.
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

// serversOf finds the servers map of a map-format document and its path.
func serversOf(doc document, st style) (string, any, error) {
	root, ok := doc.root.(map[string]any)
	if !ok {
		return "", nil, apierr.Invalid("content", "expected a mapping with a servers or mcpServers key")
	}
	key := "servers"
	if st == styleMCPServers {
		if _, ok := root["mcpServers"]; ok {
			key = "mcpServers"
		}
	}
	v, ok := root[key]
	if !ok {
		if st == styleMCPServers {
			return "", nil, apierr.Invalid("content", "not an mcpServers file: no mcpServers key")
		}
		return "", nil, apierr.Invalid("content", "not an mcp.yaml file: no servers key")
	}
	return key, v, nil
}

func parseClients(doc document, st style, vars map[string]string) ([]Entry, error) {
	key, v, err := serversOf(doc, st)
	if err != nil {
		return nil, err
	}
	servers, ok := v.(map[string]any)
	if !ok && v != nil {
		return nil, apierr.Invalid(key, key+" must be a mapping of server name to server")
	}
	r := newResolver(vars)
	if st == styleMCPServers {
		if err := readInputs(doc, r); err != nil {
			return nil, err
		}
	}
	entries := make([]Entry, 0, len(servers))
	for _, name := range slices.Sorted(maps.Keys(servers)) {
		path := key + "." + name
		m, ok := servers[name].(map[string]any)
		if !ok {
			return nil, apierr.Invalid(path, "a server must be a mapping")
		}
		var s server
		if st == styleMCPServers {
			s, err = readMCPServer(path, m)
		} else {
			s, err = readYAMLServer(path, m)
		}
		if err != nil {
			return nil, err
		}
		s.name, s.path = name, path
		e, err := s.entry(r)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// readInputs marks the VS Code inputs declared with "password": true as secret.
func readInputs(doc document, r *resolver) error {
	root, _ := doc.root.(map[string]any)
	v, ok := root["inputs"]
	if !ok || v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		return apierr.Invalid("inputs", "inputs must be a list")
	}
	for i, item := range list {
		in, ok := item.(map[string]any)
		if !ok {
			return apierr.Invalid(fmt.Sprintf("inputs[%d]", i), "an input must be a mapping")
		}
		id, _ := in["id"].(string)
		if pw, _ := in["password"].(bool); pw && id != "" {
			r.secret[id] = true
		}
	}
	return nil
}

// Fields of client entries that mean nothing to mcpbus (the client's own
// auto-approval lists): accepted and dropped.
var harmless = map[string]bool{"autoApprove": true, "alwaysAllow": true}

func readMCPServer(path string, m map[string]any) (server, error) {
	s := server{enabled: true, fType: "type", fCommand: "command", fArgs: "args", fEnv: "env", fURL: "url", fHeader: "headers"}
	var err error
	hasEnabled := false
	for _, k := range slices.Sorted(maps.Keys(m)) {
		f := join(path, k)
		v := m[k]
		switch k {
		case "type":
			s.typ, err = str(f, v)
		case "command":
			s.command, err = str(f, v)
			s.hasCommand = true
		case "args":
			s.args, err = strList(f, v)
		case "env":
			s.env, err = strMap(f, v)
		case "url":
			s.url, err = str(f, v)
		case "headers":
			s.headers, err = strMap(f, v)
		case "disabled":
			var d bool
			d, err = boolean(f, v)
			if hasEnabled && d == s.enabled {
				return s, apierr.Invalid(f, "disabled contradicts enabled")
			}
			s.enabled, hasEnabled = !d, true
		case "enabled":
			var e bool
			e, err = boolean(f, v)
			if hasEnabled && e != s.enabled {
				return s, apierr.Invalid(f, "enabled contradicts disabled")
			}
			s.enabled, hasEnabled = e, true
		case "cwd":
			return s, apierr.Invalid(f, "cwd is not supported: mcpbus starts servers in a directory of its own")
		case "envFile":
			return s, apierr.Invalid(f, "envFile is not supported: list the variables in env")
		default:
			if !harmless[k] {
				return s, apierr.Invalid(f, fmt.Sprintf("unknown field %q", k))
			}
		}
		if err != nil {
			return s, err
		}
	}
	return s, nil
}

func readYAMLServer(path string, m map[string]any) (server, error) {
	s := server{enabled: true, fType: "transport.type", fCommand: "transport.command", fArgs: "transport.args",
		fEnv: "env", fURL: "transport.url", fHeader: "transport.headers"}
	var err error
	for _, k := range slices.Sorted(maps.Keys(m)) {
		f := join(path, k)
		v := m[k]
		switch k {
		case "transport":
			err = s.readYAMLTransport(f, v)
		case "env":
			s.env, err = strMap(f, v)
		case "enabled":
			s.enabled, err = boolean(f, v)
		case "oauth":
			err = checkOAuth(f, v)
			s.oauth = true
		default:
			return s, apierr.Invalid(f, fmt.Sprintf("unknown field %q", k))
		}
		if err != nil {
			return s, err
		}
	}
	if _, ok := m["transport"]; !ok {
		return s, apierr.Invalid(join(path, "transport"), "transport is required")
	}
	return s, nil
}

func (s *server) readYAMLTransport(path string, v any) error {
	m, ok := v.(map[string]any)
	if !ok {
		return apierr.Invalid(path, "transport must be a mapping")
	}
	var err error
	for _, k := range slices.Sorted(maps.Keys(m)) {
		f := join(path, k)
		v := m[k]
		switch k {
		case "type":
			s.typ, err = str(f, v)
		case "command":
			s.command, err = str(f, v)
			s.hasCommand = true
		case "args":
			s.args, err = strList(f, v)
		case "url":
			s.url, err = str(f, v)
		case "headers":
			s.headers, err = strMap(f, v)
		default:
			return apierr.Invalid(f, fmt.Sprintf("unknown field %q", k))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkOAuth checks the shape of an mcp.yaml oauth block (seeds/003
// OAuthConfig). Its values are not imported (see the package comment), so
// they are not expanded either: no variable is needed for them.
func checkOAuth(path string, v any) error {
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return apierr.Invalid(path, "oauth must be a mapping")
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		f := join(path, k)
		var err error
		switch k {
		case "auth_url", "token_url", "client_id", "client_secret", "redirect_uri":
			_, err = str(f, m[k])
		case "scopes":
			_, err = strList(f, m[k])
		default:
			return apierr.Invalid(f, fmt.Sprintf("unknown field %q", k))
		}
		if err != nil {
			return err
		}
	}
	return nil
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
	return e, nil
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

// classify turns a command line into the package mcpbus runs. Only forms the
// runner reproduces exactly become npm or docker packages.
func classify(cmd string, args []string, env map[string]string) model.Package {
	binary := model.Package{Type: model.PackageBinary, Identifier: cmd, Args: nilIfEmpty(args)}
	switch cmd {
	case "npx":
		i := 0
		for i < len(args) && (args[i] == "-y" || args[i] == "--yes") {
			i++
		}
		if i == len(args) || strings.HasPrefix(args[i], "-") {
			return binary // other npx flags: run it as written
		}
		return model.Package{Type: model.PackageNPM, Identifier: args[i], Args: nilIfEmpty(slices.Clone(args[i+1:]))}
	case "docker":
		if len(args) == 0 || args[0] != "run" {
			return binary
		}
		for i := 1; i < len(args); i++ {
			a := args[i]
			switch {
			case a == "-i" || a == "--interactive" || a == "--rm" || a == "-t" || a == "--tty" || a == "-it" || a == "-ti" || a == "--init":
			case a == "-e" || a == "--env":
				// The runner passes every env var by name (-e NAME); a value
				// on the command line (NAME=value) or a variable missing from
				// env would not be reproduced.
				if i+1 >= len(args) || !passedByName(args[i+1], env) {
					return binary
				}
				i++
			case strings.HasPrefix(a, "--env="):
				if !passedByName(strings.TrimPrefix(a, "--env="), env) {
					return binary
				}
			case strings.HasPrefix(a, "-"):
				return binary
			default:
				return model.Package{Type: model.PackageDocker, Identifier: a, Args: nilIfEmpty(slices.Clone(args[i+1:]))}
			}
		}
	}
	return binary
}

func passedByName(name string, env map[string]string) bool {
	_, ok := env[name]
	return ok && !strings.Contains(name, "=")
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

// checkHeader refuses what the runner's HTTP client could not send.
func checkHeader(field, name, val string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return apierr.Invalid(field, fmt.Sprintf("%q is not a valid HTTP header name", name))
	}
	if !httpguts.ValidHeaderFieldValue(val) {
		return apierr.Invalid(field, "the header value is not valid: no line breaks or control characters")
	}
	return nil
}

func hasSecrets(cfg *model.McpConfig) bool {
	if len(cfg.Transport.SecretHeaders) > 0 {
		return true
	}
	for _, v := range cfg.EnvVars {
		if v.IsSecret || v.SecretRef != "" {
			return true
		}
	}
	return false
}

func secretOutside(field, name string) error {
	return apierr.Invalid(field, "secret variable ${"+name+"} can only be used in env or headers: here its value would be stored in the config")
}

// secretFlag reports whether a command-line key (--api-key, TOKEN=…) passes a secret.
func secretFlag(key string) bool {
	key = strings.TrimLeft(key, "-")
	return key != "" && (model.LooksSecret(key) || strings.EqualFold(key, "key"))
}

// checkArgs refuses literal secrets on the command line (KEY=value,
// --token=value, --api-key value), which would be stored in the config.
// Numbers pass: --max-tokens 4096 is not a secret.
func checkArgs(path string, args []string) error {
	for i, a := range args {
		k, v, hasValue := strings.Cut(a, "=")
		next := ""
		if !hasValue && strings.HasPrefix(a, "-") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			next = args[i+1]
		}
		switch {
		case hasValue && v != "" && secretFlag(k) && !plainValue(v):
		case next != "" && secretFlag(k) && !plainValue(next):
			i++
		default:
			continue
		}
		return apierr.Invalid(fmt.Sprintf("%s[%d]", path, i), "a secret on the command line would be stored in the config: pass it in env (the server reads it from there) instead")
	}
	return nil
}

// plainValue reports values that are not secrets whatever the flag is
// called: numbers, booleans, paths (--token-file /run/token) and plain URLs.
func plainValue(s string) bool {
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return true
	}
	if s == "true" || s == "false" || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "./") ||
		strings.HasPrefix(s, "../") || strings.HasPrefix(s, "~/") {
		return true
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.User == nil && u.RawQuery == ""
}

// checkURL refuses a URL carrying a secret (user:password@, ?api_key=…).
func checkURL(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return nil // Validate reports a bad URL
	}
	if _, hasPw := u.User.Password(); hasPw {
		return apierr.Invalid(field, "the URL carries a password, which would be stored in the config: send it in an Authorization header")
	}
	for k := range u.Query() {
		if secretFlag(k) {
			return apierr.Invalid(field, fmt.Sprintf("the URL carries a secret in its query (%s), which would be stored in the config: send it in a header", k))
		}
	}
	return nil
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// Value readers: YAML writers put numbers and booleans where strings are
// meant (PORT: 8080), so scalars are read as their text; null is "".

func str(field string, v any) (string, error) {
	switch t := v.(type) {
	case string:
		return t, nil
	case json.Number:
		return t.String(), nil
	case bool:
		return strconv.FormatBool(t), nil
	case nil:
		return "", nil
	}
	return "", apierr.Invalid(field, "must be a string")
}

func strList(field string, v any) ([]string, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, apierr.Invalid(field, "must be a list of strings")
	}
	out := make([]string, len(list))
	for i, item := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		if item == nil {
			return nil, apierr.Invalid(f, "must be a string")
		}
		s, err := str(f, item)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

func strMap(field string, v any) (map[string]string, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, apierr.Invalid(field, "must be a mapping of names to strings")
	}
	out := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s, err := str(join(field, k), m[k])
		if err != nil {
			return nil, err
		}
		out[k] = s
	}
	return out, nil
}

func boolean(field string, v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, apierr.Invalid(field, "must be true or false")
	}
	return b, nil
}
