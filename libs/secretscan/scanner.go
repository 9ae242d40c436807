// Package secretscan finds secrets in JSON payloads (tool arguments and
// results): gitleaks' maintained rule set used as a library, rules for this
// deployment's own credentials (mcpbus API keys, NATS nkey seeds), and the
// keyed fingerprints of known secret values (Known). Findings name the rule
// and where it matched, never the value.
package secretscan

import (
	"bytes"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	"github.com/spf13/viper"
	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/detect"
	"github.com/zricethezav/gitleaks/v8/logging"
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

// Scanner scans payloads. Build it once (Default): gitleaks reads and
// checks some 220 rules. Scan is safe for concurrent use.
type Scanner struct {
	// rules are gitleaks' rules (less Excluded) and this deployment's, and
	// keywords finds those a payload may match (every rule has keywords;
	// gitleaks runs a rule only when one is in the text). A rule's Regex
	// is compiled when a payload first names it (sources holds its text):
	// the ~220 compiled regexps held 2.5 MB, most never used.
	rules    []config.Rule
	sources  []string
	keywords *prefilter
	base     config.Config // the rules' shared settings (global allowlists)
	// span is, by rule, the longest match of a rule run on windows around
	// its keywords (window.go), 0 for one run on the whole payload;
	// windowed is the set of the former, all every rule.
	span     []int
	anchors  []func() *regexp.Regexp // by rule, for those whose matches start with a keyword (span.go), compiled on first use
	heads    [][]head                // by rule, the bytes those matches start with (head.go)
	needs    [][][]string            // by rule, texts a match needs besides its keywords (span.go)
	runs     []classRun              // by rule, a run of a class every match holds (run.go)
	windowed ruleSet
	all      ruleSet
	// detectors are gitleaks detectors of a few rules each, by the set of
	// rules a payload may match: a detector of every rule walks ~220 rules
	// and an Aho-Corasick trie of all their keywords (2.7 MB) per call,
	// where one of the rules a payload's keywords name walks a handful.
	mu        sync.Mutex
	detectors map[ruleSet]*detect.Detector
	scratch   sync.Pool // *scratch
}

// maxDetectors bounds the detectors kept (each holds a small keyword trie;
// the rules' compiled regexps are shared): past it, one is dropped.
const maxDetectors = 256

// Excluded are the gitleaks rules a Scanner leaves out (see New).
var Excluded = []string{"generic-api-key"}

// Default is the process's scanner, built on first use.
var Default = sync.OnceValues(New)

// New builds a scanner with gitleaks' default rules and this deployment's.
func New() (*Scanner, error) {
	// gitleaks logs through a global zerolog logger, findings included at
	// trace level: silence it so no value reaches a log.
	logging.Logger = zerolog.Nop()
	cfg, err := defaultConfig()
	if err != nil {
		return nil, err
	}
	// Left out: generic-api-key, a heuristic for `key = "…"` assignments
	// in source files. Its regexp costs ~1.5 ms per KiB of text holding a
	// keyword as common as "key" or "token" (ten times a call on the bus),
	// and it fires on ordinary arguments (a password field). The specific
	// rules and the known values cover real credentials.
	for _, id := range Excluded {
		delete(cfg.Rules, id)
	}
	// jwt's keyword is "ey", in every "key" and "they": its regexp then ran
	// on most prose. A JWT starts with the base64 of `{"`, "eyJ".
	if r, ok := cfg.Rules["jwt"]; ok && slices.Equal(r.Keywords, []string{"ey"}) {
		r.Keywords = []string{"eyj"}
		cfg.Rules["jwt"] = r
	}
	// An mcpbus API key: mcpbus_<16 hex id>_<43 base64url> (services/gateway/auth).
	cfg.Rules[RuleAPIKey] = config.Rule{RuleID: RuleAPIKey, Description: "mcpbus API key",
		Regex: regexp.MustCompile(`mcpbus_[0-9a-f]{16}_[A-Za-z0-9_-]{43}`), Keywords: []string{"mcpbus_"}}
	s := &Scanner{base: config.Config{Allowlists: cfg.Allowlists}, detectors: map[ruleSet]*detect.Detector{}}
	keywords := map[string]ruleSet{}
	tables := map[byteSet]*[256]bool{} // the class runs' tables, one a class
	var always ruleSet
	for _, id := range slices.Sorted(maps.Keys(cfg.Rules)) {
		r := cfg.Rules[id]
		// A rule on file names (pkcs12-file, or a regexp only for some files:
		// hashicorp-tf-password, *.tf) never fires on a payload, which has
		// no file name; gitleaks would still walk the payload for its
		// keywords ("password": most prose).
		if r.Regex == nil || r.Path != nil {
			continue
		}
		if len(s.rules) == foldBit {
			return nil, fmt.Errorf("secretscan: more than %d rules", foldBit)
		}
		i := len(s.rules)
		s.all.add(i)
		if len(r.Keywords) == 0 { // gitleaks runs such a rule on everything
			always.add(i)
		}
		// What the windows and the needed texts are derived from the
		// compiled regexp, before it is dropped.
		s.needs = append(s.needs, needs(r.Regex, r.Keywords))
		var run classRun
		if len(r.RequiredRules) == 0 && !r.SkipReport { // a composite's parts run as gitleaks runs them
			run = requiredRun(r.Regex)
			run.share(tables)
		}
		s.runs = append(s.runs, run)
		if n := span(r.Regex, r.Keywords); n > 0 && windowable(r) && !slices.ContainsFunc(cfg.Allowlists, onLine) {
			s.windowed.add(i)
			s.span = append(s.span, n)
			a := anchor(r.Regex, r.Keywords)
			s.anchors = append(s.anchors, lazyRegexp(a))
			var hs []head
			if a != nil {
				hs = headsOf(r.Regex)
			}
			s.heads = append(s.heads, hs)
		} else {
			s.span = append(s.span, 0)
			s.anchors = append(s.anchors, nil)
			s.heads = append(s.heads, nil)
		}
		// Compiled once above (a bad rule fails New), dropped until used.
		s.sources = append(s.sources, r.Regex.String())
		r.Regex = nil
		s.rules = append(s.rules, r)
		for _, k := range r.Keywords {
			set := keywords[strings.ToLower(k)]
			set.add(i)
			keywords[strings.ToLower(k)] = set
		}
	}
	var fold ruleSet
	fold.add(foldBit)
	for _, r := range foldRunes {
		keywords[r] = fold
	}
	s.keywords = newPrefilter(keywords)
	s.keywords.always.or(&always)
	return s, nil
}

// defaultConfig is gitleaks' default rule set, read with a viper of its
// own: gitleaks' NewDetectorDefaultConfig reads it into viper's global
// instance, which keeps the parsed file for the life of the process, and
// builds a detector (a trie of every keyword) this package does not use.
func defaultConfig() (config.Config, error) {
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(config.DefaultConfig)); err != nil {
		return config.Config{}, err
	}
	var vc config.ViperConfig
	if err := v.Unmarshal(&vc); err != nil {
		return config.Config{}, err
	}
	return vc.Translate()
}

// configOf is the gitleaks config of the rules in set.
func (s *Scanner) configOf(set ruleSet) config.Config {
	cfg := s.base
	cfg.Rules, cfg.Keywords = map[string]config.Rule{}, map[string]struct{}{}
	for i := range s.rules {
		if !set.has(i) {
			continue
		}
		if s.rules[i].Regex == nil {
			s.rules[i].Regex = regexp.MustCompile(s.sources[i]) // it compiled in New
		}
		r := s.rules[i]
		cfg.Rules[r.RuleID] = r
		cfg.OrderedRules = append(cfg.OrderedRules, r.RuleID)
		for _, k := range r.Keywords {
			cfg.Keywords[strings.ToLower(k)] = struct{}{}
		}
	}
	return cfg
}

// detector is the gitleaks detector of the rules in set, made on first use.
func (s *Scanner) detector(set ruleSet) *detect.Detector {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.detectors[set]; ok {
		return d
	}
	cfg := s.configOf(set)
	if len(s.detectors) >= maxDetectors {
		for k := range s.detectors { // any one: a payload that needs it again rebuilds it
			delete(s.detectors, k)
			break
		}
	}
	d := detect.NewDetector(cfg)
	// A "gitleaks:allow" anywhere on a finding's line (a JSON payload is
	// mostly one line) would exempt it: a payload must not be able to
	// switch its own scan off. Lines also differ between a window and the
	// whole payload.
	d.IgnoreGitleaksAllow = true
	s.detectors[set] = d
	return d
}

// Scan returns the secrets in payload (raw JSON text), those of known
// included (known may be nil), in order of their start.
func (s *Scanner) Scan(payload []byte, known *Known) []Finding {
	// One walk over the bytes finds both the keywords and the known values.
	sc := s.getScratch()
	defer s.putScratch(sc)
	set, knownFound := s.keywords.walkWith(payload, &sc.hits, known, &sc.unknowns)
	var out []Finding
	if !set.empty() { // no rule to run: no copy for them
		text := blankEscapes(payload, sc.text)
		if len(text) > 0 && &text[0] != &payload[0] {
			sc.text = text // a copy: its buffer is kept for the next scan (cleared)
		}
		out = s.ruleFindings(text, set, sc.hits, sc)
	}
	out = append(out, seeds(payload)...)
	out = append(out, knownFound...)
	slices.SortFunc(out, func(a, b Finding) int { return a.Start - b.Start })
	return out
}

// blankEscapes is payload (JSON text) with the letter of each one-letter
// escape of a control character (\n, \t, \r, \b, \f) a space, at the same
// offsets: the rules read the text as sent, and the letter glued to what
// follows broke their word boundaries, so an AWS key on a line of its own
// ("…\nAKIA…") was "nAKIA…", no match for \bAKIA. The copy is made in buf
// (its capacity reused); payload itself when it has none. It jumps from
// backslash to backslash (bytes.IndexByte): a byte loop over the rest of a
// 64 KiB result of lines cost more than the rest of its scan.
func blankEscapes(payload, buf []byte) []byte {
	var out []byte
	for i := 0; ; i += 2 { // past the backslash and the byte it escapes
		j := bytes.IndexByte(payload[i:], '\\')
		if j < 0 || i+j+1 >= len(payload) {
			break
		}
		i += j
		if escapedLetter(payload[i+1]) {
			if out == nil {
				out = append(buf[:0], payload...)
			}
			out[i+1] = ' '
		}
	}
	if out == nil {
		return payload
	}
	return out
}

// escapedLetter tells the letters of JSON's one-letter escapes of control
// characters.
func escapedLetter(c byte) bool {
	return c == 'n' || c == 't' || c == 'r' || c == 'b' || c == 'f'
}

// ruleFindings are the findings of gitleaks' rules in payload given the
// keyword walk's rules and hits: every occurrence of each value found
// (gitleaks reports lines and columns, the value is what redaction needs
// to find).
func (s *Scanner) ruleFindings(payload []byte, set ruleSet, hits []hit, sc *scratch) []Finding {
	var out []Finding
	for _, f := range s.detect(payload, set, hits, sc) {
		v := f.Secret
		if v == "" {
			v = f.Match
		}
		if v == "" {
			continue
		}
		for off := 0; ; {
			i := bytes.Index(payload[off:], []byte(v))
			if i < 0 {
				break
			}
			out = append(out, Finding{Rule: f.RuleID, Start: off + i, End: off + i + len(v)})
			off += i + len(v)
		}
	}
	return out
}

// Span is a byte range [Start, End) of a payload.
type Span struct{ Start, End int }

// ScanSkipping is Scan of payload less the bytes of skip: whole JSON
// values (a string with its quotes), in order and apart. A result's base64
// image, audio or blob data is one: it holds no text a rule or a known
// value could be read in, and gitleaks' unbounded rules (jwt, flyio) ran on
// all of it once a keyword appeared by chance, ~250 ns a byte (a 256 KiB
// screenshot: 67 ms). The rest is scanned piece by piece; each piece ends
// and starts outside a string, so the known-value check pairs its quotes.
func (s *Scanner) ScanSkipping(payload []byte, known *Known, skip []Span) []Finding {
	if len(skip) == 0 {
		return s.Scan(payload, known)
	}
	var out []Finding
	at := 0
	for i := 0; i <= len(skip); i++ {
		end, next := len(payload), len(payload) // past the last span: the rest
		if i < len(skip) {
			end, next = skip[i].Start, skip[i].End
		}
		if end > at {
			for _, f := range s.Scan(payload[at:end], known) {
				f.Start, f.End = f.Start+at, f.End+at
				out = append(out, f)
			}
		}
		at = max(at, next)
	}
	return out
}

// windowable reports whether r's findings depend only on its matches (not
// on its line, other rules' findings, or a file): then its regexp may run
// on windows (window.go).
func windowable(r config.Rule) bool {
	if len(r.RequiredRules) > 0 || r.SkipReport || strings.Contains(strings.ToLower(r.RuleID), "generic") {
		return false // composite rules; gitleaks drops a generic finding that another rule's holds
	}
	for _, k := range r.Keywords {
		if len(k) < 2 { // not an occurrence the keyword walk records
			return false
		}
	}
	return !slices.ContainsFunc(r.Allowlists, onLine)
}

// onLine reports whether a allows findings by their line.
func onLine(a *config.Allowlist) bool { return a.RegexTarget == "line" }

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
