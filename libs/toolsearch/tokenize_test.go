package toolsearch_test

import (
	"slices"
	"testing"

	"github.com/mcpbus/mcpbus/libs/toolsearch"
)

func TestTokens(t *testing.T) {
	cases := map[string][]string{
		"read_text_file":          {"read", "text", "fil"},
		"getTinyImage":            {"get", "tiny", "imag"},
		"list-directory":          {"list", "directory"},
		"HTTPServer":              {"http", "server"},
		"List the files in a dir": {"list", "fil", "dir"},
		"directories":             {"directory"},
		"creating created create": {"creat", "creat", "creat"},
		"string":                  {"string"},
		"searches running":        {"search", "run"},
		"sha256Sum":               {"sha256", "sum"},
		"":                        nil,
	}
	for in, want := range cases {
		if got := toolsearch.Tokens(in); !slices.Equal(got, want) {
			t.Errorf("Tokens(%q) = %q, want %q", in, got, want)
		}
	}
}
