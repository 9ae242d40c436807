package model

import "github.com/mcpbus/mcpbus/libs/secretscan"

// SecretValue reports whether v has the shape of a credential whatever the
// variable holding it is called (GH=ghp_…): what the runner's secret
// scanner takes for one (gitleaks' rules, NATS seeds, this deployment's API
// keys), so that a value refused here is the value the scanner would block
// in a call's arguments. Values no secret can be (a boolean, a URL without
// credentials, a count, a path, a word) match no rule.
func SecretValue(v string) bool {
	s, err := secretscan.Default()
	if err != nil || v == "" {
		return false // the scanner's rules are built in: it does not fail
	}
	return len(s.Scan([]byte(v), nil)) > 0
}
