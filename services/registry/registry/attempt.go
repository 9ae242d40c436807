package registry

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

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
	// hostRun: the package runs on this host (npm), so a path in its
	// arguments or environment is granted to it by the runner's sandbox and
	// must come from the user, never from the registry entry.
	hostRun bool
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

// authType guesses the auth scheme from the names the option asks for: a
// *_CLIENT_ID and *_CLIENT_SECRET pair is an OAuth app's, any other secret
// an API key, no secret none.
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
