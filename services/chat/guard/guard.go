// Package guard holds the agent loop's guards against the failures users of
// other agent loops complain of most: a model that calls the same tool with
// the same arguments again and again, a server that keeps failing, and a
// tool result too large for the model's context.
package guard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Repeats counts calls by tool and canonical arguments within one turn.
type Repeats struct {
	limit int
	seen  map[string]int
}

// NewRepeats trips on the limit-th identical call (limit < 2 means 3).
func NewRepeats(limit int) *Repeats {
	if limit < 2 {
		limit = 3
	}
	return &Repeats{limit: limit, seen: map[string]int{}}
}

// Call records a call of tool with args and reports how many identical calls
// there have been, and whether that reaches the limit. Arguments compare by
// value: key order and spacing do not matter.
func (r *Repeats) Call(tool string, args json.RawMessage) (n int, tripped bool) {
	key := tool + "\x00" + string(Canonical(args))
	r.seen[key]++
	n = r.seen[key]
	return n, n >= r.limit
}

// Canonical is args re-encoded with sorted keys and no spacing; invalid JSON
// is returned trimmed as it is, and an absent value as {}.
func Canonical(args json.RawMessage) []byte {
	args = bytes.TrimSpace(args)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		return []byte("{}")
	}
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		return args
	}
	out, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return args
	}
	return out
}

// Breaker stops calls to a server after consecutive failures, until a call
// to it succeeds (a half-open probe is the caller's choice).
type Breaker struct {
	threshold int
	fails     map[string]int
}

// NewBreaker opens after threshold consecutive failures (< 1 means 3).
func NewBreaker(threshold int) *Breaker {
	if threshold < 1 {
		threshold = 3
	}
	return &Breaker{threshold: threshold, fails: map[string]int{}}
}

// Record notes the outcome of a call to server.
func (b *Breaker) Record(server string, ok bool) {
	if ok {
		delete(b.fails, server)
		return
	}
	b.fails[server]++
}

// Open reports whether calls to server are stopped.
func (b *Breaker) Open(server string) bool { return b.fails[server] >= b.threshold }

// Cut returns text whole when it fits budget bytes, else its head and tail
// with a note in between naming how much was left out and how to read the
// whole (ref: where the full result is kept). The cut never splits a UTF-8
// character.
func Cut(text string, budget int, ref string) (string, bool) {
	if budget <= 0 || len(text) <= budget {
		return text, false
	}
	note := fmt.Sprintf("\n\n[… %d of %d bytes cut here; the whole result is %s …]\n\n", len(text)-budget, len(text), ref)
	keep := budget - len(note)
	if keep < 2 {
		keep = 2
	}
	head := keep * 2 / 3
	tail := keep - head
	h := text[:head]
	for len(h) > 0 && !utf8.ValidString(h) {
		h = h[:len(h)-1]
	}
	t := text[len(text)-tail:]
	for len(t) > 0 && !utf8.ValidString(t) {
		t = t[1:]
	}
	return h + note + t, true
}
