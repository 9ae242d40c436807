package registry

import (
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/mcpbus/mcpbus/libs/model"
)

// smitheryPlanner turns a Smithery server into an install plan: each
// connection is an option.
type smitheryPlanner struct {
	detail *SmitheryDetail
	url    string // where the server was read
}

func (p smitheryPlanner) plan(in model.RegistryGetRequest, _ host) (*model.InstallPlan, error) {
	d := p.detail
	var attempts []*attempt
	for i, c := range d.Connections {
		attempts = append(attempts, smitheryConnection(c, i, in.Variables))
	}
	info := entryInfo{
		source: model.SourceSmithery, name: d.QualifiedName, qualifiedName: d.QualifiedName,
		title: d.DisplayName, description: d.Description, url: p.url,
	}
	plan, err := buildPlan(info, attempts, in)
	if err != nil {
		return nil, err
	}
	for _, t := range d.Tools {
		plan.Tools = append(plan.Tools, model.PlanTool{Name: clean(t.Name, 128), Description: clean(t.Description, 1000)})
	}
	if d.Security != nil && !d.Security.ScanPassed {
		plan.Warnings = append(plan.Warnings, "Smithery's security scan of this server did not pass")
	}
	return plan, nil
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
	if !a.inputName(f.Name) {
		return
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
