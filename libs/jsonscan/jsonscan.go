// Package jsonscan is a small scanner over the top level of one JSON object,
// for the hot paths that pass JSON on without decoding it. The runner runs it
// on every line an MCP server writes, to tell responses to its own raw calls
// from go-sdk's traffic and to cut out their result; the gateway rewrites a
// result's protocol fields with it. So it must cost one pass with no
// allocation whatever the size of the input. It does not validate: what is
// handed on unparsed is checked by whoever passes it on (the runner validates
// the result it replies with), and a malformed line that is not one of the
// runner's own still reaches go-sdk's decoder, which rejects it.
package jsonscan

import (
	"bytes"
	"encoding/json"
)

// Members calls fn with the raw key (between its quotes, escapes left as
// they are) and the raw value of each top-level member of the object in b,
// until fn returns false. It reports false when b is not an object or ends early.
func Members(b []byte, fn func(key, val []byte) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for i < len(b) {
		if b[i] != '"' {
			return false
		}
		end := skipString(b, i)
		if end < 0 {
			return false
		}
		key := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		vend := skipValue(b, i)
		if vend < 0 {
			return false
		}
		if !fn(key, b[i:vend]) {
			return true
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
	return false
}

// Key is the name a raw key (as Members gives it) spells, its escapes
// decoded as a JSON decoder reads them, so that a member cannot pass a check
// of its name as "structuredCont\u0065nt" and reach a client as
// structuredContent. A key without escapes is only copied.
func Key(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw)
	}
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	var s string
	if json.Unmarshal(q, &s) != nil {
		return string(raw)
	}
	return s
}

// KeyIs reports whether raw spells name (see Key); without escapes it
// allocates nothing.
func KeyIs(raw []byte, name string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == name
	}
	return Key(raw) == name
}

// KeepMembers returns the object in b with only the top-level members whose
// raw key keep accepts, each written as it stood (key and value bytes
// unchanged).
func KeepMembers(b []byte, keep func(rawKey []byte) bool) []byte {
	out := make([]byte, 0, len(b))
	out = append(out, '{')
	Members(b, func(key, val []byte) bool {
		if keep(key) {
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(append(append(out, '"'), key...), '"', ':')
			out = append(out, val...)
		}
		return true
	})
	return append(out, '}')
}

// Elements calls fn with the raw value of each element of the array in b,
// until fn returns false. It reports false when b is not an array or ends
// early.
func Elements(b []byte, fn func(val []byte) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return true
	}
	for i < len(b) {
		end := skipValue(b, i)
		if end < 0 {
			return false
		}
		if !fn(b[i:end]) {
			return true
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return true
		default:
			return false
		}
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string starting at b[i] ('"'), or -1.
// It jumps from quote to quote (bytes.IndexByte): a result's base64 image
// is one string of hundreds of KiB. A quote closes the string when an even
// number of backslashes precedes it.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); {
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return -1
		}
		end, slashes := j+q, 0
		for k := end - 1; k > i && b[k] == '\\'; k-- {
			slashes++
		}
		if slashes%2 == 0 {
			return end + 1
		}
		j = end + 1
	}
	return -1
}

// skipValue returns the index just past the value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end := skipString(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	// A number, true, false or null: up to the next delimiter.
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			if j == i {
				return -1 // no value at all
			}
			return j
		}
		j++
	}
	return j
}
