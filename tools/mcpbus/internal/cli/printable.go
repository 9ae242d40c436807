package cli

import (
	"strings"
	"unicode"
)

// printable is s with every control character (C0, DEL, C1) and bidi
// override shown as U+FFFD: text that MCP servers wrote (tool names,
// descriptions, results) reaches the operator's terminal, where an escape
// sequence could hide part of it, rewrite the screen or set the clipboard
// (OSC 52).
func printable(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unsafeRune(r) {
			return unicode.ReplacementChar
		}
		return r
	}, s)
}

// printableLines is printable keeping s's line breaks (an error's text).
func printableLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = printable(l)
	}
	return strings.Join(lines, "\n")
}

func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}
