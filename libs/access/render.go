package access

import (
	"fmt"
	"slices"
	"strings"
)

// EnvNKey is the environment variable a rendered configuration reads a
// role's public nkey from (nats-server resolves $VARS from its environment).
func EnvNKey(role Role) string { return "MCPBUS_" + strings.ToUpper(string(role)) + "_NKEY" }

// Render writes the authorization block of a nats-server configuration for
// every service role, from the table: each identity of ids one nkey user
// with its role's permissions and its own inbox (_I.<name>); a role without
// an identity in ids gets one user named after it whose key is a
// $MCPBUS_<ROLE>_NKEY reference. Agents are added as their own users by the
// operator (see mcpbus agents).
func Render(prefix string, ids []Identity) (string, error) {
	var b strings.Builder
	b.WriteString("# mcpbus bus identities and permissions, rendered from the permission table\n")
	b.WriteString("# (libs/access/table.go); a test keeps this file and the table in step.\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, role := range ServiceRoles() {
		r, err := ruleOf(role)
		if err != nil {
			return "", err
		}
		users := []Identity{{Name: string(role), Role: role, Public: "$" + EnvNKey(role)}}
		if mine := slices.DeleteFunc(slices.Clone(ids), func(id Identity) bool { return id.Role != role }); len(mine) > 0 {
			users = mine
		}
		for _, id := range users {
			p, err := ForIdentity(id, prefix)
			if err != nil {
				return "", err
			}
			key := id.Public
			if !strings.HasPrefix(key, "$") {
				key = fmt.Sprintf("%q", key)
			}
			fmt.Fprintf(&b, "    # %s (%s): %s\n", id.Name, role, r.Why)
			fmt.Fprintf(&b, "    { nkey: %s\n      permissions: {\n", key)
			fmt.Fprintf(&b, "        publish: { allow: %s, deny: %s }\n", list(p.Publish), list(p.DenyPublish))
			fmt.Fprintf(&b, "        subscribe: { allow: %s }\n", list(p.Subscribe))
			b.WriteString("      }\n    }\n")
		}
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
