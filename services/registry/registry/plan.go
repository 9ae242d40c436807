package registry

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// An install plan is made in three steps. Each option of the entry (its
// packages and remotes, or its connections: plan_official.go,
// plan_smithery.go) is evaluated for this host as an attempt (attempt.go,
// with inputs.go and sanitize.go); choose picks one; buildPlan turns it into
// the plan and its draft McpConfig.

// Package type preference when the request names none: a local npm
// package, then a container, then a hosted endpoint.
var preference = map[string]int{model.PackageNPM: 0, model.PackageDocker: 1, model.PackageHTTP: 2}

// host says what this host can run.
type host struct {
	has func(cmd string) bool
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
