package model

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/mcpbus/mcpbus/libs/pattern"
)

// MaxNameLen is the limit of namespaced tool names (LLM APIs accept 64).
const MaxNameLen = 64

var (
	slugPattern = pattern.MustCompile(`^[a-z0-9_-]+$`, 1, 64)
	namePattern = pattern.MustCompile(`^[a-zA-Z0-9_-]+$`, 1, MaxNameLen)
)

// tokenSafe reports whether s is made only of [a-zA-Z0-9_-], at least one:
// a tool name kept as its subject token. Every call's subject is made with
// it (ToolToken), so it is a loop over the bytes, not a regexp match.
func tokenSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// ValidSlug reports whether s may name a server on the bus.
func ValidSlug(s string) bool { return slugPattern.MatchString(s) }

// ValidName reports whether s may be a namespaced tool name.
func ValidName(s string) bool { return namePattern.MatchString(s) }

// SeparableSlug reports whether s, a valid slug, keeps <s>__<tool> split at
// its first "__": s holds no "__" and does not end in "_" (server "a_" with
// tool "_b" and server "a" with tool "__b" would both be "a____b"). A new
// server's slug must be one; every reader of a namespaced name (approval
// rules, key tool filters, the chat's hold, tasks, /mcp/invoke) cuts there.
func SeparableSlug(s string) bool {
	return !strings.Contains(s, "__") && !strings.HasSuffix(s, "_")
}

// Slugify derives a server slug from a display name: lower case, runs of other
// characters become one '-', runs of '_' one '_', at most 48 characters, and
// separable (SeparableSlug).
func Slugify(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(strings.TrimSpace(name)) {
		switch {
		case r == '_':
			if s := b.String(); !strings.HasSuffix(s, "_") {
				b.WriteRune(r)
			}
			dash = false
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		default:
			if !dash && b.Len() > 0 {
				b.WriteByte('-')
				dash = true
			}
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > 48 {
		s = s[:48]
	}
	return strings.TrimRight(s, "-_")
}

// shortHash is a stable 8-hex-digit suffix for names that had to change.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

// MaxTokenLen bounds a tool's subject token (MCP asks tool names of at most
// 128 characters). A server's name is someone else's input: a token as long
// as the name put subjects and pin keys past NATS's 4 KiB control line, and
// publishing one closed the runner's connection.
const MaxTokenLen = 128

// ToolToken makes a tool name safe as one subject token. Names made only of
// [a-zA-Z0-9_-], up to MaxTokenLen, are kept; others get their unsafe
// characters replaced, are cut to fit, and get a hash of the original
// appended, so two different names never share a token.
func ToolToken(tool string) string {
	if len(tool) <= MaxTokenLen && tokenSafe(tool) {
		return tool
	}
	h := shortHash(tool)
	s := sanitize(tool)
	if max := MaxTokenLen - len(h) - 1; len(s) > max {
		s = s[:max]
	}
	return s + "_" + h
}

// NamespacedName is <server>__<tool>, fitted to ^[a-zA-Z0-9_-]{1,64}$. A name
// that had to be changed or shortened ends in a stable hash of the original.
func NamespacedName(server, tool string) string {
	full := server + "__" + tool
	if namePattern.MatchString(full) {
		return full
	}
	h := shortHash(full)
	s := sanitize(full)
	if max := MaxNameLen - len(h) - 1; len(s) > max {
		s = s[:max]
	}
	return s + "_" + h
}

// ToolNames are the names approval rules match a tool by: name, the one
// clients see, and <server>__<tool> as the server names the tool when that
// differs (NamespacedName shortened or sanitised it, or ClashName renamed
// it), so a rule written either way holds, denies or allows the same calls.
// An empty tool (a record stored before it was kept) gives name alone.
func ToolNames(name, server, tool string) []string {
	if tool == "" || len(name) == len(server)+2+len(tool) && strings.HasPrefix(name, server) &&
		strings.HasPrefix(name[len(server):], "__") && strings.HasSuffix(name, tool) {
		return []string{name}
	}
	return []string{name, server + "__" + tool}
}

// ClashName is the name of a tool whose namespaced name another tool has too
// (server "a" with tool "b__c" and server "a__b" with tool "c" are both
// "a__b__c"): the name shortened, plus a hash of the tool's own identity, so
// it is stable whatever the other tools are and whichever arrived first.
// Every front door that lists the whole catalog (the gateway's /mcp, the
// chat) names clashing tools so, never serving one under the other's name.
func ClashName(base, server, tool string) string {
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	h := hex.EncodeToString(sum[:4])
	b := sanitize(base)
	if max := MaxNameLen - len(h) - 1; len(b) > max {
		b = b[:max]
	}
	return b + "_" + h
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}
