package mcpserver

import (
	"encoding/json"
	"testing"
)

// Which tools/call params ask for a task, in each era.
func TestTaskCall(t *testing.T) {
	ext := `"_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`
	for _, tc := range []struct {
		params string
		modern bool
		want   bool
	}{
		{`{"name":"a__b","arguments":{"x":1},"task":{"ttl":1000}}`, false, true},
		{`{"name":"a__b","task":{}}`, false, true},
		{`{"name":"a__b","task":null}`, false, false},
		{`{"name":"a__b","arguments":{"task":{}}}`, false, false}, // an argument named task
		{`{"name":"a__b","task":{}}`, true, false},                // the 2025-11-25 form from a 2026-07-28 client
		{`{"name":"a__b",` + ext + `}`, true, true},
		{`{"name":"a__b",` + ext + `}`, false, false},
		{`{"name":"a__b","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":null}}}}`, true, false},
		{`{"name":"a__b","requestState":"s","inputResponses":{},` + ext + `}`, true, false}, // a retry
		{`{"task":{}}`, false, false}, // no name: go-sdk answers
	} {
		name, _, got := taskCall(json.RawMessage(tc.params), tc.modern)
		if got != tc.want || (got && name != "a__b") {
			t.Errorf("taskCall(%s, modern %v) = %q %v, want %v", tc.params, tc.modern, name, got, tc.want)
		}
	}
}
