package model

import (
	"net/url"
	"strings"
	"unicode"
)

// The word-based part of the secret heuristic. LooksSecret (credential.go)
// matches substrings such as TOKEN or SECRET; the words here are too short or
// too common to match inside other words (PASS in PASSPORT, DSN in …DSNAME,
// SESSION in SESSION_TIMEOUT), so they count only as whole words of a name
// split at '_', '-', '.' and lower→upper case changes.

// secretWords make a name secret wherever they stand as a whole word.
var secretWords = map[string]bool{
	"PASSWORD": true, "PASSWD": true, "PASSPHRASE": true, "PASSCODE": true,
	"CREDENTIAL": true, "CREDENTIALS": true, "CREDS": true,
	"DSN": true, "CONNSTR": true, "CONNECTIONSTRING": true, "PRIVATEKEY": true,
	"SESSIONID": true, "SESSIONKEY": true, "SESSIONTOKEN": true,
}

// lastSecretWords make a name secret as its last word only (DB_PASS,
// MYSQL_PWD, SESSION_COOKIE, but not PASS_THROUGH or COOKIE_DOMAIN). PWD alone
// is the shell's working directory and stays plain.
var lastSecretWords = map[string]bool{
	"PASS": true, "PWD": true, "COOKIE": true, "COOKIES": true, "SESSION": true,
}

// secretPairs are two consecutive words that make a name secret.
var secretPairs = map[[2]string]bool{
	{"PRIVATE", "KEY"}: true, {"CONNECTION", "STRING"}: true, {"CONN", "STRING"}: true, {"CONN", "STR"}: true,
	{"SESSION", "ID"}: true, {"SESSION", "KEY"}: true, {"SESSION", "TOKEN"}: true, {"SESSION", "SECRET"}: true,
	{"SESSION", "COOKIE"}: true, {"PASS", "WORD"}: true, {"PASS", "PHRASE"}: true,
}

// nameWords splits an env var, header or parameter name into upper-case
// words: at '_', '-', '.', and where a lower-case letter or digit is followed
// by an upper-case one (dbPassword → DB PASSWORD).
func nameWords(name string) []string {
	var words []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			words = append(words, strings.ToUpper(string(cur)))
			cur = cur[:0]
		}
	}
	var prev rune
	for _, r := range name {
		switch {
		case r == '_' || r == '-' || r == '.' || r == ' ':
			flush()
		case unicode.IsUpper(r) && (unicode.IsLower(prev) || unicode.IsDigit(prev)):
			flush()
			cur = append(cur, r)
		default:
			cur = append(cur, r)
		}
		prev = r
	}
	flush()
	return words
}

// looksSecretWords is the word-based test LooksSecret adds to its substrings.
func looksSecretWords(name string) bool {
	words := nameWords(name)
	for i, w := range words {
		if secretWords[w] {
			return true
		}
		if i > 0 && secretPairs[[2]string{words[i-1], w}] {
			return true
		}
	}
	if n := len(words); n > 0 && lastSecretWords[words[n-1]] {
		return n > 1 || words[0] != "PWD"
	}
	return false
}

// secretParams are query parameters that carry a secret although their names
// are too generic for LooksSecret (?key=, ?sig= of a signed URL, ?auth=).
var secretParams = map[string]bool{
	"KEY": true, "SIG": true, "SIGNATURE": true, "AUTH": true, "PASS": true, "PWD": true,
	"SESSION": true, "SID": true,
}

// secretParam reports whether a URL query or fragment parameter name
// usually carries a secret: what LooksSecret says of a name, plus the short
// names of secretParams (also as the last word: X-Amz-Signature).
func secretParam(name string) bool {
	if LooksSecret(name) {
		return true
	}
	words := nameWords(name)
	return len(words) > 0 && secretParams[words[len(words)-1]]
}

// SecretURL reports whether value is a URL that carries a secret: a password
// in its user info (postgres://user:pw@host/db) or a non-empty query or
// fragment parameter named like a secret (?api_key=…, ?access_token=…,
// ?sig=…, #access_token=…). The config service treats such a value as a
// secret whatever its variable is called: it goes to the credential service,
// not into the config.
func SecretURL(value string) bool {
	value = strings.TrimSpace(value)
	if !strings.Contains(value, "://") {
		return false
	}
	u, err := url.Parse(value)
	if err != nil || u.Scheme == "" {
		return false
	}
	if pw, ok := u.User.Password(); ok && pw != "" {
		return true
	}
	for _, raw := range []string{u.RawQuery, u.Fragment} {
		if raw == "" {
			continue
		}
		// Split by hand: url.ParseQuery drops a whole pair that holds a ';'.
		for _, part := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
			k, v, _ := strings.Cut(part, "=")
			if uk, err := url.QueryUnescape(k); err == nil {
				k = uk
			}
			if v != "" && secretParam(k) {
				return true
			}
		}
	}
	return false
}
