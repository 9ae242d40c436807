package serverfile

import (
	"regexp"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

var (
	varName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	inputName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`) // VS Code input ids are freer
)

// reference is one parsed ${…}.
type reference struct {
	name   string
	def    string
	hasDef bool
}

// parseReference reads the inside of ${…}: NAME, NAME:-default, env:NAME,
// input:id (VS Code). ok is false for anything else.
func parseReference(body string) (reference, bool) {
	pattern := varName
	switch {
	case strings.HasPrefix(body, "env:"):
		body = body[len("env:"):]
	case strings.HasPrefix(body, "input:"):
		body, pattern = body[len("input:"):], inputName
	}
	var r reference
	r.name, r.def, r.hasDef = strings.Cut(body, ":-")
	if !pattern.MatchString(r.name) || strings.Contains(r.def, "$") {
		return r, false
	}
	return r, true
}

// resolver replaces references from the caller's variables.
type resolver struct {
	vars map[string]string
	// secret marks names that are secret whatever they look like (VS Code
	// inputs with "password": true).
	secret map[string]bool
}

func newResolver(vars map[string]string) *resolver {
	return &resolver{vars: vars, secret: map[string]bool{}}
}

func (r *resolver) isSecret(name string) bool { return r.secret[name] || model.LooksSecret(name) }

// expand replaces the references of s. secretVar is the first referenced
// variable that is secret ("" if none). Errors name field and never quote s,
// which may hold a secret.
func (r *resolver) expand(field, s string) (out, secretVar string, err error) {
	if !strings.Contains(s, "$") {
		return s, "", nil
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '$')
		if i < 0 {
			b.WriteString(s)
			return b.String(), secretVar, nil
		}
		b.WriteString(s[:i])
		s = s[i:]
		switch {
		case strings.HasPrefix(s, "$${"):
			b.WriteString("${")
			s = s[3:]
		case strings.HasPrefix(s, "${"):
			end := strings.IndexByte(s, '}')
			if end < 0 {
				return "", "", apierr.Invalid(field, "malformed variable reference: ${ without a closing } (write $${ for a literal ${)")
			}
			ref, ok := parseReference(s[2:end])
			if !ok {
				return "", "", apierr.Invalid(field, "unsupported variable reference: use ${NAME} or ${NAME:-default} (write $${ for a literal ${)")
			}
			if ownSetting(ref.name) {
				return "", "", apierr.Invalid(field, "${"+ref.name+"} is one of mcpbus's own settings, which no server's config may take (its secrets among them): name a variable of your own")
			}
			val, defined := r.vars[ref.name]
			switch {
			case ref.hasDef && val == "":
				val = ref.def
			case !defined:
				return "", "", apierr.Invalid(field, "undefined variable ${"+ref.name+"}")
			}
			if secretVar == "" && r.isSecret(ref.name) {
				secretVar = ref.name
			}
			b.WriteString(val)
			s = s[end+1:]
		default:
			b.WriteByte('$')
			s = s[1:]
		}
	}
}

// ownSetting tells mcpbus's own settings (MCPBUS_*, any case) from the
// variables a config may take: they hold its secrets (the Vault secret id,
// the credential service's curve seed), and a file imported from elsewhere
// must not move them into a server's environment or arguments.
func ownSetting(name string) bool {
	return len(name) >= len("MCPBUS_") && strings.EqualFold(name[:len("MCPBUS_")], "MCPBUS_")
}

// scanText lists the distinct variable names referenced in s, in order,
// skipping anything malformed.
func scanText(s string) []string {
	var out []string
	seen := map[string]bool{}
	for {
		i := strings.IndexByte(s, '$')
		if i < 0 {
			return out
		}
		s = s[i:]
		switch {
		case strings.HasPrefix(s, "$${"):
			s = s[3:]
		case strings.HasPrefix(s, "${"):
			end := strings.IndexByte(s, '}')
			if end < 0 {
				return out
			}
			if ref, ok := parseReference(s[2:end]); ok && !seen[ref.name] {
				seen[ref.name] = true
				out = append(out, ref.name)
			}
			s = s[end+1:]
		default:
			s = s[1:]
		}
	}
}

// escape makes a literal value survive expand: ${ becomes $${.
func escape(s string) string { return strings.ReplaceAll(s, "${", "$${") }
