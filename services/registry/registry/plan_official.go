package registry

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/distribution/reference"
	"golang.org/x/net/http/httpguts"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/netguard"
)

// officialPlanner turns an Official Registry entry into an install plan:
// each package and remote is an option, evaluated for this host.
type officialPlanner struct {
	entry *OfficialEntry
	url   string // where the entry was read
}

func (p officialPlanner) plan(in model.RegistryGetRequest, h host) (*model.InstallPlan, error) {
	e := p.entry
	if e.Status == StatusDeleted {
		return nil, apierr.Newf(apierr.NotFound, "%s (version %s) was deleted from the official registry", in.Name, officialVersion(in)).WithField("name")
	}
	var attempts []*attempt
	for i, pkg := range e.Server.Packages {
		attempts = append(attempts, officialPackage(pkg, i, h, in.Variables))
	}
	for i, r := range e.Server.Remotes {
		attempts = append(attempts, officialRemote(r, len(e.Server.Packages)+i, in.Variables))
	}
	info := entryInfo{
		source: model.SourceOfficial, name: e.Server.Name, version: e.Server.Version,
		title: e.Server.Title, description: e.Server.Description, url: p.url,
	}
	plan, err := buildPlan(info, attempts, in)
	if err != nil {
		return nil, err
	}
	if e.Status == StatusDeprecated {
		plan.Warnings = append(plan.Warnings, "the publisher deprecated this server")
	}
	return plan, nil
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
	case p.Version == "":
		a.unusable("the package names no version: npx would run whichever version is newest at each start")
		return
	case !semverPattern.MatchString(p.Version):
		a.unusable("%q is not an exact package version (such as 1.2.3): npx would resolve it anew at each start", clean(p.Version, 64))
		return
	}
	ident := p.Identifier + "@" + p.Version
	a.pkg = model.PlanPackage{Type: model.PackageNPM, RegistryType: "npm", Identifier: ident, Version: p.Version, RuntimeHint: "npx"}
	a.hostRun = true
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
	if u, err := url.Parse("//" + reference.Domain(ref)); err != nil || netguard.InternalHost(u.Hostname()) {
		// docker would pull from it, over plain HTTP for a loopback one.
		a.unusable("image %q is not on a public registry host (loopback, private, link-local or a local name)", clean(ident, 100))
		return
	}
	tagged, isTagged := ref.(reference.Tagged)
	_, digested := ref.(reference.Digested)
	tag := ""
	if isTagged {
		tag = tagged.Tag()
	}
	if !isTagged && !digested && p.Version != "" {
		// Schemas before 2025-12 kept the tag in version.
		if !tagPattern.MatchString(p.Version) {
			a.unusable("%q is not a valid image tag", clean(p.Version, 64))
			return
		}
		tag = p.Version
		ident += ":" + p.Version
	}
	if !digested && (tag == "" || tag == "latest") {
		// docker would pull whatever the tag points to at each start.
		a.unusable("image %q names no fixed version (no tag other than latest, no digest): docker would run whichever image is newest at each start", clean(ident, 100))
		return
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
			a.unusable("the URL holds the secret %s, which would end up in the config", clean(name, 64))
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
			if arg.Format == "boolean" || (runtime != "" && switchFlags[arg.Name]) {
				b, err := strconv.ParseBool(v)
				switch {
				case v == "" && arg.Format != "boolean":
					out = append(out, arg.Name) // a switch given without a value
				case err != nil:
					a.unusable("argument %s takes no value but true or false", arg.Name)
				case b:
					out = append(out, arg.Name)
				}
				continue
			}
			if mountFlags[arg.Name] && !a.userMount(arg, v) {
				continue
			}
			if runtime == "docker" && envFlags[arg.Name] && !strings.Contains(v, "=") {
				// docker run -e NAME copies NAME from the docker client's
				// environment, which is the runner's (its inherited part:
				// npm_config_* tokens, proxies, DOCKER_*): not the entry's to ask for.
				a.unusable("%s %s would copy the runner's own environment variable into the container; an entry may only set NAME=value", arg.Name, clean(v, 64))
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

// envVars reads a package's environment variables: secrets become
// credentials (and secret_ref entries of the draft), others get values.
func (a *attempt) envVars(list []KeyValueInput) {
	for _, ev := range list {
		if !envNamePattern.MatchString(ev.Name) {
			a.unusable("environment variable name %q is not valid", clean(ev.Name, 64))
			continue
		}
		if model.EnvNameDenied(ev.Name) {
			// The runner refuses it at spawn (model.ExecPolicy): say so now.
			a.unusable("environment variable %s is not allowed: it changes what the runtime loads or runs", ev.Name)
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
