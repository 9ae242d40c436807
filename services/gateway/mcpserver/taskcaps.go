package mcpserver

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The Tasks capability. go-sdk v1.8.0 has no field for the "tasks" server
// capability of 2025-11-25, so a session's InitializeResult is encoded with
// it added; clients of 2026-07-28 see the extension among the server's
// capabilities (server/discover), which go-sdk's Extensions carries.

// tasksCapability is what /mcp answers itself (tasks.go): list, cancel and
// tools/call as a task.
var tasksCapability = json.RawMessage(`{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`)

// withTasks adds the capability to an initialize result; others pass.
func (a *Aggregator) withTasks(res mcp.Result) mcp.Result {
	if r, ok := res.(*mcp.InitializeResult); ok && a.tasksServed() {
		return tasksInit{r}
	}
	return res
}

type tasksInit struct{ *mcp.InitializeResult }

func (r tasksInit) MarshalJSON() ([]byte, error) {
	raw, err := json.Marshal(r.InitializeResult)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	caps := map[string]json.RawMessage{}
	if c, ok := fields["capabilities"]; ok {
		if err := json.Unmarshal(c, &caps); err != nil {
			return nil, err
		}
	}
	caps["tasks"] = tasksCapability
	if fields["capabilities"], err = json.Marshal(caps); err != nil {
		return nil, err
	}
	return json.Marshal(fields)
}
