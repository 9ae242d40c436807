// Package secretscan finds secrets in JSON payloads (tool arguments and
// results): gitleaks' maintained rule set used as a library, rules for this
// deployment's own credentials (mcpbus API keys, NATS nkey seeds), and the
// keyed fingerprints of known secret values (Known). Findings name the rule
// and where it matched, never the value.
package secretscan

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/detect"
	"github.com/zricethezav/gitleaks/v8/logging"
	"github.com/zricethezav/gitleaks/v8/report"
)

// Rule ids of this package's own detectors.
const (
	RuleKnown  = "mcpbus-known-secret"
	RuleAPIKey = "mcpbus-api-key"
	RuleSeed   = "nats-nkey-seed"
)

// Finding is one secret in a payload: its rule and its byte span.
type Finding struct {
	Rule       string
	Start, End int
}

// Scanner scans payloads. Build it once (Default): gitleaks compiles some
// 200 rules. Scan is safe for concurrent use: gitleaks' Detect only reads
// the detector (its one counter is atomic), so one detector is shared.
type Scanner struct {
	det *detect.Detector
	// keywords holds every rule's keywords (all rules have some): a payload
	// with none skips gitleaks, whose per-call walk of its ~220 rules costs
	// about 10 µs even when no rule applies.
	keywords *prefilter
}

// Excluded are the gitleaks rules a Scanner leaves out (see New).
var Excluded = []string{"generic-api-key"}

// Default is the process's scanner, built on first use.
var Default = sync.OnceValues(New)

// New builds a scanner with gitleaks' default rules and this deployment's.
func New() (*Scanner, error) {
	// gitleaks logs through a global zerolog logger, findings included at
	// trace level: silence it so no value reaches a log.
	logging.Logger = zerolog.Nop()
	d, err := detect.NewDetectorDefaultConfig()
	if err != nil {
		return nil, err
	}
	cfg := d.Config
	cfg.Rules = maps(cfg.Rules)
	// Left out: generic-api-key, a heuristic for `key = "…"` assignments
	// in source files. Its regexp costs ~1.5 ms per KiB of text holding a
	// keyword as common as "key" or "token" (ten times a call on the bus),
	// and it fires on ordinary arguments (a password field). The specific
	// rules and the known values cover real credentials.
	for _, id := range Excluded {
		delete(cfg.Rules, id)
	}
	cfg.OrderedRules = slices.DeleteFunc(slices.Clone(cfg.OrderedRules), func(id string) bool { return slices.Contains(Excluded, id) })
	// jwt's keyword is "ey", in every "key" and "they": its regexp then ran
	// on most prose. A JWT starts with the base64 of `{"`, "eyJ".
	if r, ok := cfg.Rules["jwt"]; ok && slices.Equal(r.Keywords, []string{"ey"}) {
		r.Keywords = []string{"eyj"}
		cfg.Rules["jwt"] = r
	}
	cfg.Keywords = map[string]struct{}{}
	for _, r := range cfg.Rules {
		for _, k := range r.Keywords {
			cfg.Keywords[strings.ToLower(k)] = struct{}{}
		}
	}
	// An mcpbus API key: mcpbus_<16 hex id>_<43 base64url> (services/gateway/auth).
	add(&cfg, config.Rule{RuleID: RuleAPIKey, Description: "mcpbus API key",
		Regex: regexp.MustCompile(`mcpbus_[0-9a-f]{16}_[A-Za-z0-9_-]{43}`), Keywords: []string{"mcpbus_"}})
	words := make([]string, 0, len(cfg.Keywords))
	for k := range cfg.Keywords {
		words = append(words, k)
	}
	return &Scanner{det: detect.NewDetector(cfg), keywords: newPrefilter(words)}, nil
}

func maps(in map[string]config.Rule) map[string]config.Rule {
	out := make(map[string]config.Rule, len(in)+2)
	for k, v := range in {
		out[k] = v
	}
	return out
}

func add(cfg *config.Config, r config.Rule) {
	cfg.Rules[r.RuleID] = r
	cfg.OrderedRules = append(cfg.OrderedRules, r.RuleID)
	if cfg.Keywords == nil {
		// jwt's keyword is "ey", in every "key" and "they": its regexp then ran
		// on most prose. A JWT starts with the base64 of `{"`, "eyJ".
		if r, ok := cfg.Rules["jwt"]; ok && slices.Equal(r.Keywords, []string{"ey"}) {
			r.Keywords = []string{"eyj"}
			cfg.Rules["jwt"] = r
		}
		cfg.Keywords = map[string]struct{}{}
	}
	for _, k := range r.Keywords {
		cfg.Keywords[k] = struct{}{}
	}
}

// Scan returns the secrets in payload (raw JSON text), those of known
// included (known may be nil), in order of their start.
func (s *Scanner) Scan(payload []byte, known *Known) []Finding {
	var out []Finding
	for _, f := range s.gitleaks(payload) {
		v := f.Secret
		if v == "" {
			v = f.Match
		}
		if v == "" {
			continue
		}
		// Every occurrence: gitleaks reports lines and columns, the value
		// is what redaction needs to find.
		for off := 0; ; {
			i := bytes.Index(payload[off:], []byte(v))
			if i < 0 {
				break
			}
			out = append(out, Finding{Rule: f.RuleID, Start: off + i, End: off + i + len(v)})
			off += i + len(v)
		}
	}
	out = append(out, seeds(payload)...)
	out = append(out, known.scan(payload)...)
	slices.SortFunc(out, func(a, b Finding) int { return a.Start - b.Start })
	return out
}

// gitleaks runs gitleaks' rules on payload if any of their keywords is in
// it (gitleaks matches them lowercased).
func (s *Scanner) gitleaks(payload []byte) []report.Finding {
	if !s.keywords.mayMatch(payload) {
		return nil
	}
	return s.det.DetectBytes(payload)
}

// Rules are the distinct rule ids of found, in order.
func Rules(found []Finding) []string {
	var out []string
	for _, f := range found {
		if !slices.Contains(out, f.Rule) {
			out = append(out, f.Rule)
		}
	}
	return out
}
