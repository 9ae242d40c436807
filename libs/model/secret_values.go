package model

import "strings"

// The shapes of credential values: what a plain env var's value must not
// look like (RefuseInlineSecrets). Only shapes no other value has: a
// vendor's token prefix with the length and alphabet of what follows, a
// PEM private key, a JWT, this deployment's own API keys and NATS seeds.
// Values no secret can be (a boolean, a URL without credentials, a count,
// a path, a word) have none of them.

// tokenShape is a token that starts with prefix followed by at least min
// characters of its alphabet (and nothing else).
type tokenShape struct {
	prefix string
	min    int
	alpha  string // extra characters beside ASCII letters and digits
}

var tokenShapes = []tokenShape{
	// GitHub: classic and fine-grained personal tokens, OAuth, app and refresh tokens.
	{"ghp_", 36, ""}, {"gho_", 36, ""}, {"ghu_", 36, ""}, {"ghs_", 36, ""}, {"ghr_", 36, ""},
	{"github_pat_", 22, "_"},
	{"glpat-", 20, "_-"}, // GitLab
	// Slack bot, user, app-level and refresh tokens.
	{"xoxb-", 10, "-"}, {"xoxp-", 10, "-"}, {"xoxa-", 10, "-"}, {"xoxr-", 10, "-"}, {"xoxs-", 10, "-"}, {"xoxe-", 10, "-"}, {"xapp-", 10, "-"},
	{"sk-", 20, "_-"},                                                                      // OpenAI (sk-, sk-proj-), Anthropic (sk-ant-)
	{"sk_live_", 16, ""}, {"rk_live_", 16, ""}, {"sk_test_", 16, ""}, {"rk_test_", 16, ""}, // Stripe
	{"AIza", 35, "_-"}, // Google API key
	{"npm_", 36, ""},
	{"hf_", 30, ""},       // Hugging Face
	{"mcpbus_", 60, "_-"}, // mcpbus API key: mcpbus_<16 hex>_<43 base64url>
}

// SecretValue reports whether v has the shape of a credential whatever
// the variable holding it is called (GH=ghp_…).
func SecretValue(v string) bool {
	v = strings.TrimSpace(v)
	for _, s := range tokenShapes {
		if rest, ok := strings.CutPrefix(v, s.prefix); ok && len(rest) >= s.min && inAlphabet(rest, s.alpha) {
			return true
		}
	}
	if strings.Contains(v, "-----BEGIN") && strings.Contains(v, "PRIVATE KEY-----") {
		return true
	}
	return jwtShape(v) || nkeySeed(v)
}

func inAlphabet(s, extra string) bool {
	for _, c := range s {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune(extra, c)) {
			return false
		}
	}
	return true
}

// jwtShape: three base64url parts, the first two JSON objects ("eyJ" is
// the base64 of `{"`), as a bearer token is.
func jwtShape(v string) bool {
	parts := strings.Split(v, ".")
	if len(parts) != 3 || !strings.HasPrefix(parts[0], "eyJ") || !strings.HasPrefix(parts[1], "eyJ") || len(parts[2]) < 16 {
		return false
	}
	for _, p := range parts {
		if !inAlphabet(p, "_-") {
			return false
		}
	}
	return true
}

// nkeySeed: a NATS user, account or operator seed (S, U/A/O, 56 base32).
func nkeySeed(v string) bool {
	if len(v) != 58 || v[0] != 'S' || !strings.ContainsRune("UAO", rune(v[1])) {
		return false
	}
	for _, c := range v[2:] {
		if (c < 'A' || c > 'Z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}
