package toolsearch

import (
	"strings"
	"unicode"
)

// Tool names are identifiers (read_text_file, getTinyImage, list-directory)
// and descriptions are prose: both are cut into lowercase words at every
// non-letter-or-digit and at each lower-to-upper case change, so that a
// query "read file" meets read_text_file and "tiny image" meets getTinyImage.

// stopwords carry no meaning for ranking; dropping them keeps a query like
// "list the files in a directory" from matching every tool that says "the".
var stopwords = map[string]bool{
	"a": true, "an": true, "and": true, "are": true, "as": true, "at": true, "be": true, "by": true,
	"for": true, "from": true, "if": true, "in": true, "into": true, "is": true, "it": true, "its": true,
	"of": true, "on": true, "or": true, "that": true, "the": true, "this": true, "to": true, "with": true,
	"can": true, "will": true, "use": true, "used": true, "using": true, "tool": true, "me": true, "my": true,
	"i": true, "you": true, "your": true, "do": true, "does": true, "which": true, "all": true, "any": true,
}

// Tokens returns the index terms of s: words split at separators and case
// changes, lowercased, stopwords dropped, each reduced by stem.
func Tokens(s string) []string {
	var out []string
	var word []rune
	flush := func() {
		if len(word) == 0 {
			return
		}
		w := strings.ToLower(string(word))
		word = word[:0]
		if stopwords[w] {
			return
		}
		out = append(out, stem(w))
	}
	rs := []rune(s)
	for i, r := range rs {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			// camelCase: a split before an upper-case letter that follows a
			// lower-case one or a digit, or that starts a word after an
			// acronym (HTTPServer -> http, server).
			if unicode.IsUpper(r) && len(word) > 0 {
				prev := rs[i-1]
				nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
				if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
					flush()
				}
			}
			word = append(word, r)
		default:
			flush()
		}
	}
	flush()
	return out
}

// stem folds the commonest English inflections (files/file,
// listing/list, created/create, directories/directory) so that a query and a
// description need not use the same form: suffixes -s, -es, -ies, -ing and
// -ed go, then a doubled final consonant and a final e (create, created and
// creating all become "creat"). It is deliberately light, not Porter: a wrong
// fold costs precision across the whole catalog, a missed one only one query.
func stem(w string) string {
	n := len(w)
	switch {
	case n > 4 && strings.HasSuffix(w, "ies"):
		return w[:n-3] + "y"
	case n > 5 && strings.HasSuffix(w, "ing") && hasVowel(w[:n-3]):
		w = undouble(w[:n-3])
	case n > 4 && strings.HasSuffix(w, "ed") && !strings.HasSuffix(w, "eed") && hasVowel(w[:n-2]):
		w = undouble(w[:n-2])
	case n > 4 && (strings.HasSuffix(w, "sses") || strings.HasSuffix(w, "xes") || strings.HasSuffix(w, "ches") || strings.HasSuffix(w, "shes")):
		return w[:n-2]
	case n > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		w = w[:n-1]
	}
	if len(w) > 3 && strings.HasSuffix(w, "e") {
		w = w[:len(w)-1]
	}
	return w
}

func hasVowel(s string) bool { return strings.ContainsAny(s, "aeiouy") }

// undouble drops a doubled final consonant left by a suffix (running -> run).
func undouble(w string) string {
	n := len(w)
	if n >= 3 && w[n-1] == w[n-2] && !strings.ContainsRune("aeiouls", rune(w[n-1])) {
		return w[:n-1]
	}
	return w
}
