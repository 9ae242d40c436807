package jwtauth

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/mcpbus/mcpbus/services/gateway/auth"
)

// ScopePrefix starts the token scopes the gateway understands without a
// map: mcpbus:call, mcpbus:chat, mcpbus:admin and mcpbus:tool:<glob>.
const ScopePrefix = "mcpbus:"

// toolGrant starts a grant that narrows the tools: tool:<glob>.
const toolGrant = "tool:"

// grants is what one token scope gives: key scopes and tool globs.
type grants struct {
	scopes []string
	tools  []string
}

// ScopeMap turns a token's scopes into the principal's key scopes and tool
// filter. Built in: mcpbus:<grant> for every grant. Configured entries add
// names an authorization server already issues.
type ScopeMap struct {
	entries map[string]grants
}

// ParseScopeMap reads entries "<token scope>=<grant> [<grant>...]", grants
// being admin, call, chat or tool:<glob> (a path.Match glob over the
// namespaced tool names <server>__<tool>), e.g. "mcp.tools=call" or
// "github.read=call tool:github__get_*".
func ParseScopeMap(entries []string) (ScopeMap, error) {
	m := ScopeMap{entries: map[string]grants{}}
	for _, e := range entries {
		name, list, ok := strings.Cut(e, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t\"\\") {
			return ScopeMap{}, fmt.Errorf("--oauth-scope-map %q must be <token scope>=<grant> [<grant>...]", e)
		}
		if strings.HasPrefix(name, ScopePrefix) {
			return ScopeMap{}, fmt.Errorf("--oauth-scope-map %q: scopes starting %s are built in", e, ScopePrefix)
		}
		g, err := parseGrants(strings.Fields(list))
		if err != nil {
			return ScopeMap{}, fmt.Errorf("--oauth-scope-map %q: %w", e, err)
		}
		if _, dup := m.entries[name]; dup {
			return ScopeMap{}, fmt.Errorf("--oauth-scope-map maps %q twice", name)
		}
		m.entries[name] = g
	}
	return m, nil
}

func parseGrants(list []string) (grants, error) {
	var g grants
	if len(list) == 0 {
		return g, fmt.Errorf("no grant (admin, call, chat or tool:<glob>)")
	}
	for _, s := range list {
		switch {
		case s == auth.ScopeAdmin || s == auth.ScopeCall || s == auth.ScopeChat:
			g.scopes = append(g.scopes, s)
		case strings.HasPrefix(s, toolGrant):
			glob := strings.TrimPrefix(s, toolGrant)
			if _, err := path.Match(glob, ""); err != nil || glob == "" {
				return g, fmt.Errorf("grant %q: %q is not a glob", s, glob)
			}
			g.tools = append(g.tools, glob)
		default:
			return g, fmt.Errorf("unknown grant %q (admin, call, chat or tool:<glob>)", s)
		}
	}
	return g, nil
}

// builtin reads a mcpbus:* scope (ok false for any other, or a bad one).
func builtin(scope string) (grants, bool) {
	rest, ok := strings.CutPrefix(scope, ScopePrefix)
	if !ok {
		return grants{}, false
	}
	g, err := parseGrants([]string{rest})
	return g, err == nil
}

// Apply returns the key scopes and the tool filter's allow list a token's
// scopes give. Tool grants narrow: a token with any lists only the tools
// they name; without any, every tool (of its scopes) is allowed.
func (m ScopeMap) Apply(tokenScopes []string) (scopes, tools []string) {
	for _, s := range tokenScopes {
		g, ok := builtin(s)
		if !ok {
			g, ok = m.entries[s]
		}
		if !ok {
			continue
		}
		for _, sc := range g.scopes {
			if !slices.Contains(scopes, sc) {
				scopes = append(scopes, sc)
			}
		}
		tools = append(tools, g.tools...)
	}
	return scopes, tools
}

// Supported lists the token scopes worth asking for: the built-in key
// scopes and the mapped names, sorted.
func (m ScopeMap) Supported() []string {
	out := []string{ScopePrefix + auth.ScopeAdmin, ScopePrefix + auth.ScopeCall, ScopePrefix + auth.ScopeChat}
	for name := range m.entries {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// TokenScope names the token scope a client should ask for to get the key
// scope: a mapped name that grants it without narrowing the tools (the
// first in order), else mcpbus:<scope>.
func (m ScopeMap) TokenScope(scope string) string {
	var names []string
	for name, g := range m.entries {
		if slices.Contains(g.scopes, scope) && len(g.tools) == 0 {
			names = append(names, name)
		}
	}
	if len(names) > 0 {
		slices.Sort(names)
		return names[0]
	}
	return ScopePrefix + scope
}
