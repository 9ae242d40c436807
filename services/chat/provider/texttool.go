package provider

import (
	"encoding/json"
	"regexp"
	"strings"
)

var (
	taggedCall = regexp.MustCompile(`(?s)<tool_call>\s*(.*?)\s*(?:</tool_call>|$)`)
	fencedCall = regexp.MustCompile("(?s)```(?:json|JSON|tool_call)?\\s*\n?(\\{.*?\\})\\s*```")
)

// TextToolCalls finds tool calls a model wrote as text in its answer instead
// of as structured tool calls, as local models often do:
//
//	<tool_call>{"name": "x", "arguments": {…}}</tool_call>   (Hermes, Qwen; several allowed)
//	```json
//	{"name": "x", "arguments": {…}}
//	```
//	{"name": "x", "arguments": {…}}                            (the whole answer)
//
// "parameters" is accepted for "arguments" (Llama), and arguments given as a
// JSON string are unwrapped. The calls have no ID. None found: nil.
func TextToolCalls(text string) []ToolCall {
	var out []ToolCall
	for _, m := range taggedCall.FindAllStringSubmatch(text, -1) {
		if c, ok := parseTextCall(m[1]); ok {
			out = append(out, c)
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, m := range fencedCall.FindAllStringSubmatch(text, -1) {
		if c, ok := parseTextCall(m[1]); ok {
			out = append(out, c)
		}
	}
	if len(out) > 0 {
		return out
	}
	if c, ok := parseTextCall(text); ok {
		return []ToolCall{c}
	}
	return nil
}

// TextToolCall is the first of TextToolCalls, if any.
func TextToolCall(text string) (ToolCall, bool) {
	calls := TextToolCalls(text)
	if len(calls) == 0 {
		return ToolCall{}, false
	}
	return calls[0], true
}

func parseTextCall(s string) (ToolCall, bool) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") {
		return ToolCall{}, false
	}
	var v struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(s), &v); err != nil || v.Name == "" {
		return ToolCall{}, false
	}
	args := v.Arguments
	if len(args) == 0 {
		args = v.Parameters
	}
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	var str string
	if json.Unmarshal(args, &str) == nil {
		args = json.RawMessage(str)
	}
	return ToolCall{Name: v.Name, Arguments: string(args)}, true
}
