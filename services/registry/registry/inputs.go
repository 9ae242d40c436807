package registry

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mcpbus/mcpbus/libs/model"
)

// Every value an option asks for is resolved here, whatever the source:
// from the registry, the caller's variables or a default, and recorded as a
// plan input, a missing input, or (for a secret) a credential.

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
		Format: clean(in.Format, 32), Value: value,
	}
	for _, c := range in.Choices {
		pi.Choices = append(pi.Choices, clean(c, 200))
	}
	if in.Format != "filepath" && !(a.hostRun && len(model.HostPaths(in.Default)) > 0) {
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
// input without a value is listed as missing. A package run on this host
// whose fixed value names a host path of the registry's choosing (its text
// outside the {vars}) is not usable: the sandbox would grant that path to it.
func (a *attempt) resolve(kind, name string, in Input, urlPart bool) (string, bool) {
	if !a.inputName(name) {
		return "", false
	}
	if in.Value != "" {
		if a.hostRun && !urlPart {
			if paths := model.HostPaths(placeholderExpr.ReplaceAllString(in.Value, "v")); len(paths) > 0 {
				a.unusable("the registry entry names the host path %q in %s %s: a path on this host must come from you", clean(paths[0], 100), kind, clean(name, 64))
			}
		}
		return a.substitute(in.Value, in.Variables, urlPart)
	}
	v, ok := a.userValue(name, in)
	registryPath := a.hostRun && len(model.HostPaths(in.Default)) > 0
	switch {
	case ok && urlPart && !urlSafeValue.MatchString(v):
		a.userError("variables."+name, "%s is part of a URL: use letters, digits and . _ ~ - only", name)
	case !ok && in.Default != "" && in.Format != "filepath" && !registryPath:
		v, ok = in.Default, true
		if urlPart && !urlSafeValue.MatchString(v) {
			a.unusable("the default of URL variable %s is not a plain word", clean(name, 64))
		}
	}
	a.record(kind, name, in, v)
	// A path the registry meant as a default is the user's to name.
	if !ok && (in.IsRequired || registryPath) {
		a.addMissing(name)
	}
	return v, ok
}

// inputName checks a name the registry gives an input (a config property,
// an argument's valueHint): the plan lists it and the user types it back as
// a variable, so it must be one a variable can have.
func (a *attempt) inputName(name string) bool {
	if !variablePattern.MatchString(name) {
		a.unusable("input name %q is not valid (letters, digits, _ . - only)", clean(name, 64))
		return false
	}
	return true
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
