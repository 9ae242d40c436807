package access

import (
	"fmt"
	"strings"
)

// EnvNKey is the environment variable a rendered configuration reads a
// role's public nkey from (nats-server resolves $VARS from its environment).
func EnvNKey(role Role) string { return "MCPBUS_" + strings.ToUpper(string(role)) + "_NKEY" }

// Render writes the authorization block of a nats-server configuration for
// every service role, from the table: each role one nkey user (the public
// key given, or a $MCPBUS_<ROLE>_NKEY reference when none is) with its
// permissions and inbox. Agents are added as their own users by the
// operator (see mcpbus agents).
func Render(prefix string, publicKeys map[Role]string) (string, error) {
	var b strings.Builder
	b.WriteString("# mcpbus bus identities and permissions, rendered from the permission table\n")
	b.WriteString("# (libs/access/table.go); a test keeps this file and the table in step.\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, role := range ServiceRoles() {
		r, err := ruleOf(role)
		if err != nil {
			return "", err
		}
		p, err := For(role, prefix, Inbox(string(role)))
		if err != nil {
			return "", err
		}
		key := publicKeys[role]
		if key == "" {
			key = "$" + EnvNKey(role)
		} else {
			key = fmt.Sprintf("%q", key)
		}
		fmt.Fprintf(&b, "    # %s: %s\n", role, r.Why)
		fmt.Fprintf(&b, "    { nkey: %s\n      permissions: {\n", key)
		fmt.Fprintf(&b, "        publish: { allow: %s }\n", list(p.Publish))
		fmt.Fprintf(&b, "        subscribe: { allow: %s }\n", list(p.Subscribe))
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

func list(subjects []string) string {
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
