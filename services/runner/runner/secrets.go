package runner

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/jsonscan"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/secretscan"
	"github.com/mcpbus/mcpbus/libs/toolargs"
	"github.com/mcpbus/mcpbus/services/runner/internal/launch"
)

// secretGuard scans tool arguments and results for secrets (secretscan):
// gitleaks' rules, mcpbus keys, nkey seeds, the values every server of
// this runner resolved, and the credential service's fingerprints of every
// stored value (feed.go). This runner's own are kept as keyed fingerprints
// under a key drawn per runner process, one set per server, so a secret of
// one server is caught in the calls of all the others.
//
// The scanner (gitleaks' compiled rules, ~3 MB of heap) is built by the
// first scan, so a runner whose servers all have scanning off never holds it.
type secretGuard struct {
	key []byte

	mu    sync.Mutex
	per   map[string]*secretscan.Known // by server slug
	feed  *secretscan.Known            // the credential service's (nil until fetched)
	known atomic.Pointer[secretscan.Known]
}

func newSecretGuard() (*secretGuard, error) {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return &secretGuard{key: key, per: map[string]*secretscan.Known{}}, nil
}

// scan scans payload, less the values of skip, under policy. A scanner
// that cannot be built fails closed: the payload is refused or withheld
// (policy block) under a rule naming why.
func (g *secretGuard) scan(payload []byte, skip []secretscan.Span, policy string) ([]secretscan.Finding, string) {
	sc, err := secretscan.Default()
	if err != nil {
		return []secretscan.Finding{{Rule: secretscan.RuleUnavailable}}, model.SecretsBlock
	}
	return sc.ScanSkipping(payload, g.known.Load(), skip), policy
}

// set records the secrets a server's start resolved (they replace the
// previous start's: a changed credential takes its new value's place).
func (g *secretGuard) set(slug string, secrets []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.per[slug] = secretscan.NewKnown(g.key, secrets)
	g.merge()
}

// forget drops a server's secrets when it leaves this runner.
func (g *secretGuard) forget(slug string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.per, slug)
	g.merge()
}

// setFeed replaces the credential service's fingerprints.
func (g *secretGuard) setFeed(k *secretscan.Known) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.feed = k
	g.merge()
}

func (g *secretGuard) merge() {
	sets := make([]*secretscan.Known, 0, len(g.per)+1)
	for _, k := range g.per {
		sets = append(sets, k)
	}
	g.known.Store(secretscan.Merge(append(sets, g.feed)...))
}

// findings are a scan's rules as a call event carries them.
func findings(where, action string, found []secretscan.Finding) []model.SecretFound {
	out := make([]model.SecretFound, 0, len(found))
	for _, rule := range secretscan.Rules(found) {
		out = append(out, model.SecretFound{Where: where, Rule: rule, Action: action})
	}
	return out
}

// checkArguments applies cfg's arguments policy: args to send (redacted
// under redact), what was found, and under block the refusal to answer
// (an isError result, as for the other refused calls: the server never sees it).
func (g *secretGuard) checkArguments(cfg *model.McpConfig, args []byte) ([]byte, []model.SecretFound, []byte) {
	policy := cfg.SecretScan.ArgumentsPolicy()
	if policy == model.SecretsOff {
		return args, nil, nil
	}
	found, policy := g.scan(args, nil, policy)
	if len(found) == 0 {
		return args, nil, nil
	}
	if policy == model.SecretsRedact {
		if out, err := secretscan.Redact(args, found); err == nil {
			return out, findings("arguments", policy, found), nil
		}
		policy = model.SecretsBlock // cannot be redacted in place: refused
	}
	rules := secretscan.Rules(found)
	refusal := toolargs.Result(apierr.Invalid("arguments", fmt.Sprintf(
		"the arguments carry a secret (rule %s): the call was blocked (policy secret_scan.arguments)", strings.Join(rules, ", "))))
	return nil, findings("arguments", model.SecretsBlock, found), refusal
}

// checkResult applies cfg's results policy to a call's reply.
func (g *secretGuard) checkResult(cfg *model.McpConfig, res *callReply) {
	policy := cfg.SecretScan.ResultsPolicy()
	if policy == model.SecretsOff || len(res.data) == 0 {
		return
	}
	found, policy := g.scan(res.data, binaryData(res.data), policy)
	if len(found) == 0 {
		return
	}
	if policy == model.SecretsRedact {
		if out, err := secretscan.Redact(res.data, found); err == nil {
			res.data = out
			res.secrets = append(res.secrets, findings("result", policy, found)...)
			return
		}
		policy = model.SecretsBlock // cannot be redacted in place: withheld
	}
	res.data = toolargs.Result(apierr.New(apierr.Validation, fmt.Sprintf(
		"the result carried a secret (rule %s): it was withheld (policy secret_scan.results)", strings.Join(secretscan.Rules(found), ", "))))
	res.isError, res.checked = true, true
	res.secrets = append(res.secrets, findings("result", model.SecretsBlock, found)...)
}

// checkReply applies cfg's results policy to the reply of an rpc whose
// content a server chose (resources/read, prompts/get, completion/complete):
// it reaches the caller as a tool's result does, and a resource is as
// likely a config file or an environment as a result is. Under block, or
// when a secret cannot be redacted in place, the reply is withheld: the
// error names the rule.
func (g *secretGuard) checkReply(cfg *model.McpConfig, method string, reply []byte) ([]byte, []model.SecretFound, error) {
	policy := cfg.SecretScan.ResultsPolicy()
	if policy == model.SecretsOff || !scannedReplies[method] {
		return reply, nil, nil
	}
	found, policy := g.scan(reply, replyBinary(method, reply), policy)
	if len(found) == 0 {
		return reply, nil, nil
	}
	if policy == model.SecretsRedact {
		if out, err := secretscan.Redact(reply, found); err == nil {
			return out, findings("result", policy, found), nil
		}
	}
	return nil, findings("result", model.SecretsBlock, found), apierr.New(apierr.Validation, fmt.Sprintf(
		"the %s reply carried a secret (rule %s): it was withheld (policy secret_scan.results)", method, strings.Join(secretscan.Rules(found), ", ")))
}

// scannedReplies are the rpc methods whose replies checkReply scans. The
// lists are not: a secret there (in a URI) would be redacted into a name
// nobody can read; what the items hold is scanned when they are read.
var scannedReplies = map[string]bool{"resources/read": true, "prompts/get": true, "completion/complete": true}

// scannedRequests are the rpc methods whose params checkRequest scans:
// what a caller sends the server there (a prompt's arguments, the value
// being completed and its context, a resource's URI) reaches an untrusted
// server as a tool's arguments do. The other methods carry a cursor at most.
var scannedRequests = map[string]bool{"resources/read": true, "resources/subscribe": true, "prompts/get": true, "completion/complete": true}

// checkRequest applies the arguments policy to the params of an rpc a
// caller sends its server (scannedRequests): under redact each secret is
// replaced before the server sees it; under block, or when a secret cannot
// be redacted in place, the request fails with VALIDATION_ERROR naming the
// rule and the field (params.arguments.<name>, params.uri, …).
func (g *secretGuard) checkRequest(policy, method string, params json.RawMessage) (json.RawMessage, []model.SecretFound, error) {
	if policy == model.SecretsOff || !scannedRequests[method] || len(params) == 0 {
		return params, nil, nil
	}
	found, policy := g.scan(params, nil, policy)
	if len(found) == 0 {
		return params, nil, nil
	}
	if policy == model.SecretsRedact {
		if out, err := secretscan.Redact(params, found); err == nil {
			return out, findings("arguments", policy, found), nil
		}
	}
	// The first finding's field: a later one's path could pass through a
	// member whose name is the earlier secret.
	first := found[0]
	for _, f := range found[1:] {
		if f.Start < first.Start {
			first = f
		}
	}
	field := "params" + jsonPath(params, first.Start)
	return nil, findings("arguments", model.SecretsBlock, found), apierr.Invalid(field, fmt.Sprintf(
		"the %s request carries a secret in %s (rule %s): it was blocked (policy secret_scan.arguments)", method, field, strings.Join(secretscan.Rules(found), ", ")))
}

// jsonPath is the path (.name, [i]) from b's top to the innermost value of
// b that holds the byte at off; "" when that is b itself, or off is in a
// member's name.
func jsonPath(b []byte, off int) string {
	var path strings.Builder
	for val := b; ; {
		var next []byte
		visit := func(seg string, v []byte) bool {
			if start := cap(b) - cap(v); off >= start && off < start+len(v) { // v is a slice of b
				next = v
				path.WriteString(seg)
				return false
			}
			return true
		}
		jsonscan.Members(val, func(k, v []byte) bool { return visit("."+jsonscan.Key(k), v) })
		if next == nil {
			i := 0
			jsonscan.Elements(val, func(v []byte) bool { i++; return visit("["+strconv.Itoa(i-1)+"]", v) })
		}
		if next == nil {
			return path.String()
		}
		val = next
	}
}

// checkRelayed applies policy to what is relayed between a server and its
// caller's client (clientreq.go): a server's sampling/createMessage or
// elicitation/create under the results policy (what it asks reaches the
// caller and its model as a result does), the caller's answer under the
// arguments policy (it reaches the server as arguments do). It returns the
// payload to relay, nil when it is withheld (block, or a secret that
// cannot be redacted in place), and what was found.
func (g *secretGuard) checkRelayed(policy string, payload []byte, skip []secretscan.Span) ([]byte, []secretscan.Finding, string) {
	if policy == model.SecretsOff || len(payload) == 0 {
		return payload, nil, ""
	}
	found, policy := g.scan(payload, skip, policy)
	if len(found) == 0 {
		return payload, nil, ""
	}
	if policy == model.SecretsRedact {
		if out, err := secretscan.Redact(payload, found); err == nil {
			return out, found, policy
		}
	}
	return nil, found, model.SecretsBlock
}

// checkMessage applies a call's results policy to a progress message the
// server sent its caller: like the result, it reaches the caller (and the
// model), so a secret is redacted (redact) or the message withheld (block,
// or a secret that cannot be redacted in place). It is scanned as a JSON
// string, the form a tool's text takes in its result.
func (g *secretGuard) checkMessage(policy, text string) string {
	if policy == model.SecretsOff || text == "" {
		return text
	}
	payload, err := json.Marshal(text)
	if err != nil {
		return "(the server's progress message was withheld: it could not be scanned)"
	}
	found, policy := g.scan(payload, nil, policy)
	if len(found) == 0 {
		return text
	}
	if policy == model.SecretsRedact {
		var clean string
		if out, err := secretscan.Redact(payload, found); err == nil && json.Unmarshal(out, &clean) == nil {
			return clean
		}
	}
	return "(the server's progress message was withheld: it held a secret, rule " + strings.Join(secretscan.Rules(found), ", ") + " (policy secret_scan.results))"
}

// scrubText redacts in a server's text what its results would have had
// redacted (the known values, gitleaks' rules). A text that cannot be
// redacted in place is withheld.
func (g *secretGuard) scrubText(text string) string {
	return g.scrub(text, "the server's message was withheld")
}

// scrub is text (JSON, or not) redacted with this runner's known values
// and the rules (secretscan.Scrub); what cannot be redacted in place is
// replaced by a note beginning with withheld.
func (g *secretGuard) scrub(text, withheld string) string {
	return secretscan.Scrub(text, g.known.Load(), func(rules string) string {
		return "(" + withheld + ": it held a secret, rule " + rules + ")"
	})
}

// scrubError is err with its message redacted as the server's results are:
// its own secrets and the principal's (extra), the known values, gitleaks'
// rules. A server's error text (a JSON-RPC error, an upstream's answer at
// start) reaches more than results do: the caller, the status, events,
// logs and spans. A changed message drops the cause, which holds the text.
func (s *server) scrubError(err error, extra launch.Redactor) error {
	if err == nil {
		return nil
	}
	e := apierr.From(err)
	clean := s.r.secrets.scrubText(extra.Redact(s.redact(e.Message)))
	if clean == e.Message {
		return err
	}
	return &apierr.Error{Code: e.Code, Message: clean, Field: e.Field}
}
