package model

// Policies for secrets found in a server's tool arguments and results
// (McpConfig.SecretScan): block refuses the call (arguments) or withholds the
// result; redact replaces each secret with [REDACTED:<rule>]; off does not scan.
const (
	SecretsBlock  = "block"
	SecretsRedact = "redact"
	SecretsOff    = "off"
)

// SecretsPolicies lists the valid values of each SecretsPolicy member.
var SecretsPolicies = []string{SecretsBlock, SecretsRedact, SecretsOff}

// SecretsPolicy is a server's policy for secrets in its calls; an empty
// member takes its default (block for arguments, redact for results).
type SecretsPolicy struct {
	Arguments string `json:"arguments,omitempty"`
	Results   string `json:"results,omitempty"`
}

// ArgumentsPolicy is p's policy for arguments: block unless set.
func (p SecretsPolicy) ArgumentsPolicy() string { return orDefault(p.Arguments, SecretsBlock) }

// ResultsPolicy is p's policy for results: redact unless set.
func (p SecretsPolicy) ResultsPolicy() string { return orDefault(p.Results, SecretsRedact) }

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// SecretFound is one rule that fired on a call, as its call event says:
// where (arguments or result), the rule and what was done; never the value.
type SecretFound struct {
	Where  string `json:"where"`  // arguments, result
	Rule   string `json:"rule"`   // a gitleaks rule id, or mcpbus-known-secret, mcpbus-api-key, nats-nkey-seed
	Action string `json:"action"` // block, redact
}
