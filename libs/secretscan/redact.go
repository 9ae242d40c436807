package secretscan

import (
	"encoding/json"
	"errors"
)

// Marker is what replaces a secret: [REDACTED:<rule>].
func Marker(rule string) string { return "[REDACTED:" + rule + "]" }

// ErrUnredactable says a payload's secrets could not be replaced in place
// (a match crossed a JSON string's bounds): the caller withholds it whole.
var ErrUnredactable = errors.New("secretscan: the payload cannot be redacted in place")

// Redact returns payload with each finding's span replaced by its Marker;
// overlapping spans are merged under the first one's rule. The result is
// checked to be JSON still, else ErrUnredactable.
func Redact(payload []byte, found []Finding) ([]byte, error) {
	if len(found) == 0 {
		return payload, nil
	}
	out := make([]byte, 0, len(payload))
	at := 0
	for i := 0; i < len(found); i++ {
		f := found[i]
		end := f.End
		for i+1 < len(found) && found[i+1].Start < end { // found is sorted by start
			i++
			end = max(end, found[i].End)
		}
		if f.Start < at {
			continue
		}
		out = append(out, payload[at:f.Start]...)
		out = append(out, Marker(f.Rule)...)
		at = end
	}
	out = append(out, payload[at:]...)
	if !json.Valid(out) {
		return nil, ErrUnredactable
	}
	return out, nil
}
