package provider_test

import (
	"testing"

	"github.com/mcpbus/mcpbus/services/chat/provider"
)

func TestTextToolCalls(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []provider.ToolCall
	}{
		{`<tool_call>{"name": "a__b", "arguments": {"x": 1}}</tool_call>`, []provider.ToolCall{{Name: "a__b", Arguments: `{"x": 1}`}}},
		{"Sure.\n<tool_call>\n{\"name\":\"a\",\"arguments\":{}}\n</tool_call>\n<tool_call>{\"name\":\"b\",\"arguments\":{\"y\":\"z\"}}</tool_call>",
			[]provider.ToolCall{{Name: "a", Arguments: `{}`}, {Name: "b", Arguments: `{"y":"z"}`}}},
		{`  {"name": "web__fetch", "arguments": {"url": "https://x"}}  `, []provider.ToolCall{{Name: "web__fetch", Arguments: `{"url": "https://x"}`}}},
		{`{"name": "f", "parameters": {"q": "go"}}`, []provider.ToolCall{{Name: "f", Arguments: `{"q": "go"}`}}},
		{`{"name": "f", "arguments": "{\"q\":\"go\"}"}`, []provider.ToolCall{{Name: "f", Arguments: `{"q":"go"}`}}},
		{"I'll call it:\n```json\n{\"name\": \"f\", \"arguments\": {\"n\": 2}}\n```\n", []provider.ToolCall{{Name: "f", Arguments: `{"n": 2}`}}},
		{`{"name": "f"}`, []provider.ToolCall{{Name: "f", Arguments: `{}`}}},
		{"Hello, no tools here.", nil},
		{`{"answer": 42}`, nil},
		{"```json\n{\"a\": 1}\n```", nil},
		{`<tool_call>not json</tool_call>`, nil},
		{`The JSON {"name": "f", "arguments": {}} is inside prose.`, nil},
	} {
		got := provider.TextToolCalls(tc.text)
		if len(got) != len(tc.want) {
			t.Errorf("%q: got %+v, want %+v", tc.text, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%q: call %d = %+v, want %+v", tc.text, i, got[i], tc.want[i])
			}
		}
	}
	if _, ok := provider.TextToolCall("plain"); ok {
		t.Error("TextToolCall found a call in plain text")
	}
	for _, text := range []string{"{\"name\":\"f\",\"arguments\":{\"a\":1}}"} {
		if c, ok := provider.TextToolCall(text); !ok || c.Name != "f" {
			t.Errorf("%q: %+v %v", text, c, ok)
		}
	}
}
