package provider

import (
	"errors"
	"net/url"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// A provider that cannot be reached is named once in the error, with the
// address it was given, or without one when the provider's own default was
// used ("OpenAI-compatible API at the OpenAI-compatible API API" was the
// message of a profile without a base URL).
func TestUnreachableProviderMessage(t *testing.T) {
	dial := errors.New("dial tcp: lookup api.example.com: no such host")
	cases := []struct {
		name, base, want string
	}{
		{"OpenAI-compatible API", "",
			`OpenAI-compatible API is unavailable: Post "https://api.example.com/v1/chat/completions": dial tcp: lookup api.example.com: no such host`},
		{"Anthropic API", "",
			`Anthropic API is unavailable: Post "https://api.example.com/v1/chat/completions": dial tcp: lookup api.example.com: no such host`},
		{"OpenAI-compatible API", "http://localhost:11434/v1",
			`OpenAI-compatible API at http://localhost:11434/v1 is unavailable: Post "https://api.example.com/v1/chat/completions": dial tcp: lookup api.example.com: no such host`},
	}
	for _, c := range cases {
		err := classifyOther(c.name, Config{BaseURL: c.base}, &url.Error{Op: "Post", URL: "https://api.example.com/v1/chat/completions", Err: dial})
		e := apierr.From(err)
		if e.Code != apierr.Network || e.Message != c.want {
			t.Errorf("%s, base %q: got %s %q, want NETWORK_ERROR %q", c.name, c.base, e.Code, e.Message, c.want)
		}
	}
}
