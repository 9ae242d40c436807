package secretscan

import (
	"encoding/json"
	"strings"
)

// RedactJSON returns payload (JSON text) with the secrets Scan finds in it,
// known's included (known may be nil), replaced by their Markers, and what
// was found. When a secret cannot be replaced in place the error is
// ErrUnredactable: the caller withholds the payload whole.
func (s *Scanner) RedactJSON(payload []byte, known *Known) ([]byte, []Finding, error) {
	found := s.Scan(payload, known)
	out, err := Redact(payload, found)
	return out, found, err
}

// RedactText is RedactJSON of text that is not JSON (a message, a tool's
// text): it is scanned as a JSON string, the form a tool's text takes in
// its result, so the rules read it as they read results.
func (s *Scanner) RedactText(text string, known *Known) (string, []Finding, error) {
	payload, err := json.Marshal(text)
	if err != nil { // a string always encodes; withheld rather than let through unscanned
		return "", nil, ErrUnredactable
	}
	found := s.Scan(payload, known)
	if len(found) == 0 {
		return text, nil, nil
	}
	out, err := Redact(payload, found)
	if err != nil {
		return "", found, err
	}
	var clean string
	if err := json.Unmarshal(out, &clean); err != nil {
		return "", found, ErrUnredactable
	}
	return clean, found, nil
}

// RuleUnavailable is the rule of what is withheld because no scanner could
// be built (Default failed): what cannot be scanned is not let through.
const RuleUnavailable = "mcpbus-scanner-unavailable"

// Scrub is text redacted by the default scanner for a record outside the
// call (a span's attribute, an event's message), with known's values (known
// may be nil): JSON text is scanned as it is, as tool arguments and results
// are, other text as a JSON string (RedactText). What cannot be redacted in
// place, or scanned at all, is replaced whole by withheld(rules): the
// caller words that note, which must not hold the text.
func Scrub(text string, known *Known, withheld func(rules string) string) string {
	sc, err := Default()
	if err != nil {
		return withheld(RuleUnavailable)
	}
	if json.Valid([]byte(text)) {
		out, found, err := sc.RedactJSON([]byte(text), known)
		if err != nil {
			return withheld(strings.Join(Rules(found), ", "))
		}
		return string(out)
	}
	clean, found, err := sc.RedactText(text, known)
	if err != nil {
		return withheld(strings.Join(Rules(found), ", "))
	}
	return clean
}
