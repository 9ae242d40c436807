package loop

import (
	"slices"

	"github.com/mcpbus/mcpbus/libs/model"
)

// distinctNames renames, in a copy of all, every tool whose namespaced name
// a tool of another server (or another tool) has too: server "a" with tool
// "b__c" and server "a__b" with tool "c" are both "a__b__c", and keeping the
// first listed would offer one server's tool under the other's name and
// send it the calls meant for the other. Each gets model.ClashName, as on
// the gateway's /mcp; the same tool listed twice keeps its name.
func distinctNames(all []model.Tool) []model.Tool {
	type id struct{ server, tool string }
	owners := map[string]map[id]bool{}
	for _, tl := range all {
		if owners[tl.Name] == nil {
			owners[tl.Name] = map[id]bool{}
		}
		owners[tl.Name][id{tl.Server, tl.Tool}] = true
	}
	out, copied := all, false
	for i, tl := range all {
		if tl.Name == "" || len(owners[tl.Name]) < 2 {
			continue
		}
		if !copied {
			out, copied = slices.Clone(all), true // the caller's list stays as it was
		}
		out[i].Name = model.ClashName(tl.Name, tl.Server, tl.Tool)
	}
	return out
}
