package registry

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/distribution/reference"
	"golang.org/x/net/http/httpguts"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Nothing a registry sends is executed or used as a path unchecked: package
// names, image references, URLs, argument and header names all pass strict
// patterns here, host paths come only from the user, and runtime flags (which
// docker would obey) come from a short allowlist.

var (
	npmNamePattern  = regexp.MustCompile(`^(@[a-zA-Z0-9][a-zA-Z0-9._~-]*/)?[a-zA-Z0-9][a-zA-Z0-9._~-]*$`)
	versionPattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.+_-]{0,127}$`)
	envNamePattern  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	flagPattern     = regexp.MustCompile(`^--?[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	placeholderExpr = regexp.MustCompile(`\{([A-Za-z0-9_.-]+)\}`)
	urlSafeValue    = regexp.MustCompile(`^[A-Za-z0-9._~-]{1,253}$`)
	tagPattern      = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
)

// npmRegistry is the only npm registry packages are run from: npx would
// fetch from the user's configured registry, not the entry's.
const npmRegistry = "https://registry.npmjs.org"

// Runtime flags a registry may ask for. Others (--privileged, --network
// host, --cap-add, --device …) could hand the host to the container.
var (
	dockerFlags = map[string]bool{
		"-e": true, "--env": true, "-v": true, "--volume": true, "--mount": true,
		"-p": true, "--publish": true, "-w": true, "--workdir": true,
		"--read-only": true, "--init": true, "--tmpfs": true, "--platform": true,
	}
	npxFlags = map[string]bool{"-y": true, "--yes": true}
	// mountFlags bind host paths: their source must come from the user.
	mountFlags = map[string]bool{"-v": true, "--volume": true, "--mount": true}
)

// Package type preference when the request names none: a local npm
// package, then a container, then a hosted endpoint.
var preference = map[string]int{model.PackageNPM: 0, model.PackageDocker: 1, model.PackageHTTP: 2}

// host says what this host can run.
type host struct {
	has func(cmd string) bool
}

// attempt evaluates one option (a package, remote or connection) of an
// entry: whether it can run here and, if so, what it needs.
type attempt struct {
	vars  map[string]string
	opt   model.PlanOption
	order int
	pkg   model.PlanPackage

	inputs   []model.PlanInput
	inputAt  map[string]int
	missing  []string
	creds    []model.PlanCredential
	secrets  map[string]bool // names that hold secrets (must not come in variables)
	used     map[string]bool // variables consumed
	warnings []string
	env      map[string]model.EnvVar
	headers  map[string]string
	config   map[string]any
	names    []string // env, header and config names, for auth detection
	secretN  []string
	userErr  *apierr.Error
}

func newAttempt(vars map[string]string, kind, typ, identifier string, order int) *attempt {
	return &attempt{
		vars: vars, order: order,
		opt:     model.PlanOption{Kind: kind, Type: typ, Identifier: clean(identifier, 300), Usable: true},
		inputAt: map[string]int{}, secrets: map[string]bool{}, used: map[string]bool{},
	}
}

// unusable marks the option as not runnable here (the first reason wins).
func (a *attempt) unusable(format string, args ...any) {
	if a.opt.Usable {
		a.opt.Usable = false
		a.opt.Reason = fmt.Sprintf(format, args...)
	}
}

func (a *attempt) warn(format string, args ...any) {
	w := fmt.Sprintf(format, args...)
	if !slices.Contains(a.warnings, w) {
		a.warnings = append(a.warnings, w)
	}
}

func (a *attempt) userError(field, format string, args ...any) {
	if a.userErr == nil {
		a.userErr = apierr.Invalid(field, fmt.Sprintf(format, args...))
	}
}

func (a *attempt) addMissing(name string) {
	if !slices.Contains(a.missing, name) {
		a.missing = append(a.missing, name)
	}
}

// record lists a non-secret input once (the first description wins; the
// value is updated when a later use resolves it).
func (a *attempt) record(kind, name string, in Input, value string) {
	if i, ok := a.inputAt[name]; ok {
		if a.inputs[i].Value == "" {
			a.inputs[i].Value = value
		}
		a.inputs[i].Required = a.inputs[i].Required || in.IsRequired
		return
	}
	pi := model.PlanInput{
		Name: name, Kind: kind, Description: clean(in.Description, 500), Required: in.IsRequired,
		Format: in.Format, Choices: in.Choices, Value: value,
	}
	if in.Format != "filepath" {
		pi.Default = in.Default
	}
	a.inputAt[name] = len(a.inputs)
	a.inputs = append(a.inputs, pi)
}

// userValue returns the caller's value for an input, checked against the
// input's format and choices.
func (a *attempt) userValue(name string, in Input) (string, bool) {
	v, ok := a.vars[name]
	if !ok {
		return "", false
	}
	a.used[name] = true
	field := "variables." + name
	switch {
	case len(in.Choices) > 0 && !slices.Contains(in.Choices, v):
		a.userError(field, "%s must be one of %s", name, strings.Join(in.Choices, ", "))
	case in.Format == "number":
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			a.userError(field, "%s must be a number", name)
		}
	case in.Format == "boolean":
		if _, err := strconv.ParseBool(v); err != nil {
			a.userError(field, "%s must be true or false", name)
		}
	case in.Format == "filepath":
		if !filepath.IsAbs(v) || filepath.Clean(v) != v {
			a.userError(field, "%s must be a clean absolute path", name)
		}
	}
	return v, true
}

// resolve gives an input its value: a fixed registry value (its {vars}
// substituted), else the caller's variable, else the registry's default
// (never for file paths: a host path must come from the user). A required
// input without a value is listed as missing.
func (a *attempt) resolve(kind, name string, in Input, urlPart bool) (string, bool) {
	if in.Value != "" {
		return a.substitute(in.Value, in.Variables, urlPart)
	}
	v, ok := a.userValue(name, in)
	switch {
	case ok && urlPart && !urlSafeValue.MatchString(v):
		a.userError("variables."+name, "%s is part of a URL: use letters, digits and . _ ~ - only", name)
	case !ok && in.Default != "" && in.Format != "filepath":
		v, ok = in.Default, true
		if urlPart && !urlSafeValue.MatchString(v) {
			a.unusable("the default of URL variable %s is not a plain word", clean(name, 64))
		}
	}
	a.record(kind, name, in, v)
	if !ok && in.IsRequired {
		a.addMissing(name)
	}
	return v, ok
}

// substitute fills the {var} placeholders of a registry value. Every
// placeholder must get a value: a half-filled argument is worse than none.
func (a *attempt) substitute(tmpl string, vars map[string]Input, urlPart bool) (string, bool) {
	complete := true
	out := placeholderExpr.ReplaceAllStringFunc(tmpl, func(m string) string {
		name := m[1 : len(m)-1]
		decl := vars[name]
		decl.IsRequired = true
		decl.Value = "" // a variable's own value would recurse; it is its default here
		v, ok := a.resolve(model.InputVariable, name, decl, urlPart)
		if !ok {
			complete = false
			return m
		}
		return v
	})
	return out, complete
}

// fromUser reports whether every placeholder of tmpl was given by the caller.
func (a *attempt) fromUser(tmpl string) bool {
	ms := placeholderExpr.FindAllStringSubmatch(tmpl, -1)
	if len(ms) == 0 {
		return false
	}
	for _, m := range ms {
		if _, ok := a.vars[m[1]]; !ok {
			return false
		}
	}
	return true
}

// secretVar reports whether a value template uses a secret variable.
func secretVar(in Input) bool {
	for _, m := range placeholderExpr.FindAllStringSubmatch(in.Value, -1) {
		if in.Variables[m[1]].IsSecret {
			return true
		}
	}
	return false
}

// args renders arguments: positional values as they are, named ones as
// "--name value" (two words, which every CLI parser accepts).
func (a *attempt) args(list []Argument, runtime string, allowed map[string]bool) []string {
	var out []string
	for i, arg := range list {
		label := arg.Name
		if label == "" {
			label = arg.ValueHint
		}
		if arg.IsSecret || secretVar(arg.Input) {
			if arg.IsRequired {
				a.unusable("argument %s carries a secret, which would end up in the config", clean(label, 64))
			}
			continue
		}
		switch arg.Type {
		case "positional", "":
			if runtime != "" {
				a.unusable("positional %s runtime arguments are not supported", runtime)
				continue
			}
			name := arg.ValueHint
			if name == "" {
				name = fmt.Sprintf("arg%d", i+1)
			}
			v, ok := a.resolve(model.InputArgument, name, arg.Input, false)
			if ok && a.safeArg(name, v) {
				out = append(out, v)
			}
		case "named":
			if !flagPattern.MatchString(arg.Name) {
				a.unusable("argument name %q is not a valid flag", clean(arg.Name, 64))
				continue
			}
			if runtime != "" && !allowed[arg.Name] {
				a.unusable("%s runtime argument %s is not allowed", runtime, arg.Name)
				continue
			}
			name := strings.TrimLeft(arg.Name, "-")
			v, ok := a.resolve(model.InputArgument, name, arg.Input, false)
			if !ok {
				continue
			}
			if arg.Format == "boolean" {
				if b, _ := strconv.ParseBool(v); b {
					out = append(out, arg.Name)
				}
				continue
			}
			if mountFlags[arg.Name] && !a.userMount(arg, v) {
				continue
			}
			if a.safeArg(name, v) {
				out = append(out, arg.Name, v)
			}
		default:
			a.unusable("argument type %q is unknown", clean(arg.Type, 32))
		}
	}
	return out
}

// safeArg rejects values no command line should carry.
func (a *attempt) safeArg(name, v string) bool {
	if len(v) > 4096 || strings.ContainsAny(v, "\x00\r\n") {
		a.unusable("argument %s has a value that is not a single line", clean(name, 64))
		return false
	}
	return true
}

// userMount accepts a bind mount only when its host side was given by the
// user as an absolute path; named volumes are fine.
func (a *attempt) userMount(arg Argument, value string) bool {
	tmpl := arg.Value
	var src, srcTmpl string
	if arg.Name == "--mount" {
		for _, kv := range strings.Split(value, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok && (k == "src" || k == "source") {
				src = v
			}
		}
		for _, kv := range strings.Split(tmpl, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok && (k == "src" || k == "source") {
				srcTmpl = v
			}
		}
	} else {
		src, _, _ = strings.Cut(value, ":")
		srcTmpl, _, _ = strings.Cut(tmpl, ":")
	}
	if src == "" {
		return true // tmpfs or anonymous volume
	}
	if !strings.ContainsAny(src, "/.~") {
		return true // a named volume
	}
	if srcTmpl == "" || !placeholderExpr.MatchString(srcTmpl) || placeholderExpr.ReplaceAllString(srcTmpl, "") != "" ||
		!a.fromUser(srcTmpl) || !filepath.IsAbs(src) {
		a.unusable("%s would mount host path %q chosen by the registry; a mount source must be a path you give", arg.Name, clean(src, 100))
		return false
	}
	return true
}

// envVars reads a package's environment variables: secrets become
// credentials (and secret_ref entries of the draft), others get values.
func (a *attempt) envVars(list []KeyValueInput) {
	for _, ev := range list {
		if !envNamePattern.MatchString(ev.Name) {
			a.unusable("environment variable name %q is not valid", clean(ev.Name, 64))
			continue
		}
		a.names = append(a.names, ev.Name)
		if a.env == nil {
			a.env = map[string]model.EnvVar{}
		}
		if ev.IsSecret || secretVar(ev.Input) || model.LooksSecret(ev.Name) {
			a.secret(model.CredentialEnv, ev.Name, ev.Input)
			e := model.EnvVar{IsSecret: true, Required: ev.IsRequired}
			if ev.IsRequired {
				e.SecretRef = ev.Name // the config service stores the value under this name
			}
			a.env[ev.Name] = e
			continue
		}
		v, ok := a.resolve(model.InputEnv, ev.Name, ev.Input, false)
		if ok && a.safeArg(ev.Name, v) {
			a.env[ev.Name] = model.EnvVar{Value: v, Required: ev.IsRequired}
		}
	}
}

// headersOf reads a remote's headers the same way.
func (a *attempt) headersOf(list []KeyValueInput) {
	for _, h := range list {
		if !httpguts.ValidHeaderFieldName(h.Name) {
			a.unusable("header name %q is not valid", clean(h.Name, 64))
			continue
		}
		a.names = append(a.names, h.Name)
		if h.IsSecret || secretVar(h.Input) || model.LooksSecret(h.Name) {
			a.secret(model.CredentialHeader, h.Name, h.Input)
			continue
		}
		v, ok := a.resolve(model.InputHeader, h.Name, h.Input, false)
		if !ok {
			continue
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			a.unusable("header %s has a value that is not valid", h.Name)
			continue
		}
		if a.headers == nil {
			a.headers = map[string]string{}
		}
		a.headers[h.Name] = v
	}
}

// secret lists a credential; its template (e.g. "Bearer {token}") is kept
// when the registry gives one.
func (a *attempt) secret(kind, name string, in Input) {
	for _, c := range a.creds {
		if c.Kind == kind && c.Name == name {
			return
		}
	}
	a.secrets[name] = true
	for v := range in.Variables {
		a.secrets[v] = true
	}
	a.secretN = append(a.secretN, name)
	c := model.PlanCredential{Kind: kind, Name: name, Description: clean(in.Description, 500), Required: in.IsRequired}
	if strings.Contains(in.Value, "{") {
		c.Template = clean(in.Value, 200)
	}
	a.creds = append(a.creds, c)
}

// authType applies seeds/002 §4.1: a *_CLIENT_ID and *_CLIENT_SECRET pair
// means OAuth, any other secret an API key, no secret none.
func (a *attempt) authType() string {
	var id, secret bool
	for _, n := range a.names {
		k := strings.ToUpper(strings.NewReplacer("_", "", "-", "").Replace(n))
		id = id || strings.HasSuffix(k, "CLIENTID")
		secret = secret || strings.HasSuffix(k, "CLIENTSECRET")
	}
	switch {
	case id && secret:
		return model.AuthOAuth
	case len(a.secretN) > 0:
		return model.AuthAPIKey
	}
	return model.AuthNone
}

// officialPackage evaluates one package of an Official Registry entry.
func officialPackage(p Package, order int, h host, vars map[string]string) *attempt {
	a := newAttempt(vars, "package", p.RegistryType, p.Identifier, order)
	if p.Transport.Type != "" && p.Transport.Type != "stdio" {
		a.unusable("the package serves %s; only stdio packages are run locally", clean(p.Transport.Type, 32))
		return a
	}
	switch p.RegistryType {
	case "npm":
		a.npm(p, h)
	case "oci":
		a.oci(p, h)
	case "pypi":
		a.unusable("PyPI packages need uvx or pip, which mcpbus does not run")
	case "nuget":
		a.unusable("NuGet packages need dnx (.NET), which mcpbus does not run")
	case "mcpb":
		a.unusable("MCP bundles (.mcpb) are not supported")
	default:
		a.unusable("registry type %q is not supported", clean(p.RegistryType, 32))
	}
	return a
}

func (a *attempt) npm(p Package, h host) {
	base := strings.TrimSuffix(p.RegistryBaseURL, "/")
	switch {
	case !h.has("npx"):
		a.unusable("npx (Node.js) is not installed on this host")
		return
	case base != "" && base != npmRegistry:
		a.unusable("the package comes from %s; only %s packages are run", clean(base, 100), npmRegistry)
		return
	case len(p.Identifier) > 214 || !npmNamePattern.MatchString(p.Identifier):
		a.unusable("%q is not a valid npm package name", clean(p.Identifier, 100))
		return
	case p.Version != "" && !versionPattern.MatchString(p.Version):
		a.unusable("%q is not a valid package version", clean(p.Version, 64))
		return
	}
	ident := p.Identifier
	if p.Version != "" {
		ident += "@" + p.Version
	}
	a.pkg = model.PlanPackage{Type: model.PackageNPM, RegistryType: "npm", Identifier: ident, Version: p.Version, RuntimeHint: "npx"}
	a.pkg.Args = a.args(p.PackageArguments, "", nil)
	a.pkg.RuntimeArgs = a.args(p.RuntimeArguments, "npx", npxFlags)
	a.envVars(p.EnvironmentVariables)
}

func (a *attempt) oci(p Package, h host) {
	if !h.has("docker") {
		a.unusable("docker is not installed on this host")
		return
	}
	ident := p.Identifier
	ref, err := reference.ParseNormalizedNamed(ident)
	if err != nil || strings.HasPrefix(ident, "-") {
		a.unusable("%q is not a valid image reference", clean(ident, 100))
		return
	}
	_, tagged := ref.(reference.Tagged)
	_, digested := ref.(reference.Digested)
	if !tagged && !digested && p.Version != "" {
		// Schemas before 2025-12 kept the tag in version.
		if !tagPattern.MatchString(p.Version) {
			a.unusable("%q is not a valid image tag", clean(p.Version, 64))
			return
		}
		ident += ":" + p.Version
	}
	a.pkg = model.PlanPackage{Type: model.PackageDocker, RegistryType: "oci", Identifier: ident, Version: p.Version, RuntimeHint: "docker"}
	a.pkg.RuntimeArgs = a.args(p.RuntimeArguments, "docker", dockerFlags)
	a.pkg.Args = a.args(p.PackageArguments, "", nil)
	a.envVars(p.EnvironmentVariables)
}

// officialRemote evaluates a hosted endpoint of an Official Registry entry.
func officialRemote(r Remote, order int, vars map[string]string) *attempt {
	a := newAttempt(vars, "remote", r.Type, r.URL, order)
	switch r.Type {
	case "streamable-http":
	case "sse":
		a.unusable("SSE endpoints are not supported: the runner speaks Streamable HTTP")
		return a
	default:
		a.unusable("remote type %q is not supported", clean(r.Type, 32))
		return a
	}
	for name, v := range r.Variables {
		if v.IsSecret && strings.Contains(r.URL, "{"+name+"}") {
			a.unusable("the URL holds the secret %s, which would end up in the config", name)
			return a
		}
	}
	u, complete := a.substitute(r.URL, r.Variables, true)
	if complete && a.userErr == nil { // a bad variable is the caller's error, reported as such
		if err := checkRemoteURL(u); err != nil {
			a.unusable("%s", err.Error())
			return a
		}
	}
	a.headersOf(r.Headers)
	a.pkg = model.PlanPackage{Type: model.PackageHTTP, RegistryType: r.Type, Identifier: u, URL: u, Headers: a.headers}
	return a
}

// checkRemoteURL accepts https URLs with a host and no credentials.
func checkRemoteURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || u.User != nil || strings.ContainsAny(raw, " \x00\r\n") {
		return fmt.Errorf("%q is not an https URL mcpbus would connect to", clean(raw, 200))
	}
	return nil
}

// smitheryConnection evaluates one connection of a Smithery server.
func smitheryConnection(c SmitheryConnection, order int, vars map[string]string) *attempt {
	a := newAttempt(vars, "connection", c.Type, c.DeploymentURL, order)
	switch c.Type {
	case "http":
	case "stdio":
		// Never run: stdioFunction is JavaScript and bundles are archives to execute.
		a.unusable("Smithery stdio connections start through a JavaScript function or an .mcpb bundle, which mcpbus does not run")
		return a
	default:
		a.unusable("connection type %q is not supported", clean(c.Type, 32))
		return a
	}
	if err := checkRemoteURL(c.DeploymentURL); err != nil {
		a.unusable("%s", err.Error())
		return a
	}
	fields, err := ConfigFields(c.ConfigSchema)
	if err != nil {
		a.unusable("the config schema is not readable")
		return a
	}
	for _, f := range fields {
		a.configField(f)
	}
	if u, _ := url.Parse(c.DeploymentURL); isSmitheryHost(u.Hostname()) {
		// Smithery's gateway wants the user's Smithery key (its OAuth is for browsers).
		a.names = append(a.names, "Authorization")
		a.secret(model.CredentialHeader, "Authorization", Input{
			Description: "Smithery API key, sent as a bearer token to Smithery's gateway",
			IsRequired:  true, Value: "Bearer {smithery_api_key}",
		})
	}
	a.pkg = model.PlanPackage{Type: model.PackageHTTP, RegistryType: "http", Identifier: c.DeploymentURL, URL: c.DeploymentURL, Headers: a.headers}
	return a
}

func isSmitheryHost(h string) bool {
	h = strings.ToLower(h)
	return h == "smithery.ai" || strings.HasSuffix(h, ".smithery.ai")
}

// configField places one config schema field: secrets become credentials,
// header fields headers, the rest the draft's config object.
func (a *attempt) configField(f ConfigField) {
	in := Input{Description: f.Description, IsRequired: f.Required, Default: scalarString(f.Default), Choices: f.Choices}
	switch f.Type {
	case "number", "integer":
		in.Format = "number"
	case "boolean":
		in.Format = "boolean"
	}
	a.names = append(a.names, f.Name)
	secret := model.LooksSecret(f.Name) || f.Format == "password"
	if f.Header != "" && !httpguts.ValidHeaderFieldName(f.Header) {
		a.unusable("config field %s names header %q, which is not valid", clean(f.Name, 64), clean(f.Header, 64))
		return
	}
	switch {
	case secret && f.Header != "":
		a.secret(model.CredentialHeader, f.Header, in)
		a.secrets[f.Name] = true
	case secret:
		a.secret(model.CredentialConfig, f.Name, in)
		a.warn("%s is read by Smithery's gateway from the connection URL, where mcpbus keeps no secrets: store it in a Smithery configuration profile", f.Name)
	case f.Header != "":
		if v, ok := a.resolve(model.InputHeader, f.Header, in, false); ok && httpguts.ValidHeaderFieldValue(v) {
			if a.headers == nil {
				a.headers = map[string]string{}
			}
			a.headers[f.Header] = v
		}
	default:
		v, ok := a.resolve(model.InputConfig, f.Name, in, false)
		if !ok {
			return
		}
		if a.config == nil {
			a.config = map[string]any{}
		}
		a.config[f.Name] = typedConfig(f, v)
	}
}

// typedConfig keeps the JSON type of a config value.
func typedConfig(f ConfigField, v string) any {
	if f.Default != nil && v == scalarString(f.Default) {
		return f.Default
	}
	switch f.Type {
	case "number":
		if n, err := strconv.ParseFloat(v, 64); err == nil {
			return n
		}
	case "integer":
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	case "boolean":
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
	}
	return v
}

// choose picks the option to run: the preferred type, else npm, docker,
// http in that order, the registry's order breaking ties.
func choose(attempts []*attempt, prefer string) *attempt {
	var best *attempt
	for _, a := range attempts {
		if !a.opt.Usable || (prefer != "" && a.pkg.Type != prefer) {
			continue
		}
		if best == nil || preference[a.pkg.Type] < preference[best.pkg.Type] {
			best = a
		}
	}
	return best
}

// entryInfo is what a plan says about the entry itself.
type entryInfo struct {
	source        string
	name          string
	qualifiedName string
	version       string
	title         string
	description   string
	url           string // the registry URL the entry came from
}

// buildPlan chooses an option and turns it into the plan and its draft.
func buildPlan(info entryInfo, attempts []*attempt, req model.RegistryGetRequest) (*model.InstallPlan, error) {
	plan := &model.InstallPlan{
		Source: info.source, Name: info.name, QualifiedName: info.qualifiedName, Version: info.version,
		Title: clean(info.title, 200), Description: clean(info.description, 1000),
		Options: []model.PlanOption{}, Credentials: []model.PlanCredential{}, Inputs: []model.PlanInput{},
	}
	for _, a := range attempts {
		plan.Options = append(plan.Options, a.opt)
	}
	chosen := choose(attempts, req.Prefer)
	if chosen == nil {
		return nil, noRunnable(info, attempts, req.Prefer)
	}
	if chosen.userErr != nil {
		return nil, chosen.userErr
	}
	for name := range req.Variables {
		if chosen.secrets[name] {
			return nil, apierr.Invalid("variables."+name, name+" is a secret: give it in the secrets of mcp.v1.config.create, not in variables")
		}
	}
	for i, a := range attempts {
		if a == chosen {
			plan.Options[i].Chosen = true
		}
	}
	plan.Package = chosen.pkg
	plan.Credentials = append(plan.Credentials, chosen.creds...)
	plan.Inputs = append(plan.Inputs, chosen.inputs...)
	plan.Missing = chosen.missing
	plan.AuthType = chosen.authType()
	plan.Warnings = chosen.warnings
	unused := make([]string, 0)
	for name := range req.Variables {
		if !chosen.used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	for _, name := range unused {
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("variable %s is not used by the chosen %s package", name, chosen.pkg.Type))
	}
	if len(plan.Missing) > 0 {
		return plan, nil
	}
	draft, err := draftConfig(info, chosen)
	if err != nil {
		plan.Warnings = append(plan.Warnings, "no draft: "+err.Error())
		return plan, nil
	}
	plan.Draft = draft
	plan.Ready = true
	return plan, nil
}

// noRunnable is the NOT_FOUND error that says why nothing can run.
func noRunnable(info entryInfo, attempts []*attempt, prefer string) error {
	what := "no runnable package"
	if prefer != "" {
		what = "no runnable " + prefer + " package"
	}
	if len(attempts) == 0 {
		return apierr.Newf(apierr.NotFound, "%s has %s: the registry lists no package or remote", info.name, what)
	}
	reasons := make([]string, 0, len(attempts))
	for _, a := range attempts {
		r := a.opt.Type
		if a.opt.Identifier != "" {
			r += " " + a.opt.Identifier
		}
		if a.opt.Usable {
			r += ": not of the preferred type"
		} else {
			r += ": " + a.opt.Reason
		}
		reasons = append(reasons, r)
	}
	return apierr.Newf(apierr.NotFound, "%s has %s for this host (%s)", info.name, what, strings.Join(reasons, "; "))
}

// draftConfig is the McpConfig the plan proposes; it passes the model's
// validation, so config.create accepts it as it is.
func draftConfig(info entryInfo, a *attempt) (*model.McpConfig, error) {
	cfg := &model.McpConfig{
		Name:    displayName(info),
		Enabled: true,
		Source: model.Source{
			Type: info.source, Name: info.name, Version: info.version, QualifiedName: info.qualifiedName, URL: info.url,
		},
		AuthType: a.authType(),
		EnvVars:  a.env,
	}
	cfg.Slug = model.Slugify(cfg.Name)
	if cfg.Slug == "" {
		cfg.Slug = model.Slugify(lastSegment(info.name))
	}
	switch a.pkg.Type {
	case model.PackageHTTP:
		cfg.Package = model.Package{Type: model.PackageHTTP, Identifier: a.pkg.URL}
		cfg.Transport = model.Transport{Type: model.TransportHTTP, URL: a.pkg.URL, Headers: a.headers}
	default:
		cfg.Package = model.Package{Type: a.pkg.Type, Identifier: a.pkg.Identifier, RuntimeHint: a.pkg.RuntimeHint,
			RuntimeArgs: a.pkg.RuntimeArgs, Args: a.pkg.Args}
		cfg.Transport = model.Transport{Type: model.TransportStdio}
	}
	if len(a.config) > 0 {
		raw, err := json.Marshal(a.config)
		if err != nil {
			return nil, err
		}
		cfg.Config = raw
	}
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func displayName(info entryInfo) string {
	if t := strings.TrimSpace(clean(info.title, 100)); t != "" {
		return t
	}
	return lastSegment(info.name)
}

func lastSegment(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[i+1:]
	}
	return strings.TrimPrefix(name, "@")
}

// clean makes registry text safe to show: no control characters, bounded length.
func clean(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
