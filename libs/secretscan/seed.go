package secretscan

import "bytes"

// seedLen is a NATS nkey seed's length: S, its kind, 56 base32 characters.
const seedLen = 58

// seeds finds NATS nkey seeds of users, accounts and operators (SU…, SA…,
// SO…). A hand-written scan: the regexp with word bounds cost 40 µs per
// KiB, more than all of gitleaks' keyword-gated rules together.
func seeds(payload []byte) []Finding {
	var out []Finding
	for off := 0; off+seedLen <= len(payload); {
		i := bytes.IndexByte(payload[off:len(payload)-seedLen+1], 'S')
		if i < 0 {
			break
		}
		start := off + i
		if isSeed(payload, start) {
			out = append(out, Finding{Rule: RuleSeed, Start: start, End: start + seedLen})
			off = start + seedLen
			continue
		}
		off = start + 1
	}
	return out
}

func isSeed(p []byte, start int) bool {
	if k := p[start+1]; k != 'U' && k != 'A' && k != 'O' {
		return false
	}
	if start > 0 && isWord(p[start-1]) && !afterEscape(p, start-1) {
		return false
	}
	end := start + seedLen
	if end < len(p) && isWord(p[end]) {
		return false
	}
	for _, c := range p[start+2 : end] {
		if (c < 'A' || c > 'Z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

func isWord(c byte) bool {
	return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// afterEscape tells whether p[i] is the letter of a one-letter escape (\n,
// \t, …: an odd run of backslashes before it), which reads as whitespace:
// a seed on a line of its own follows one.
func afterEscape(p []byte, i int) bool {
	if !escapedLetter(p[i]) {
		return false
	}
	n := 0
	for j := i - 1; j >= 0 && p[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}
