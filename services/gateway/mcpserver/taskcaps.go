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

// withTasks adds the capability to an initialize result and each tool's
// taskSupport to a session's tools/list (absent means "forbidden" in
// 2025-11-25, and clients then never ask for a task); others pass.
func (a *Aggregator) withTasks(res mcp.Result) mcp.Result {
	if !a.tasksServed() {
		return res
	}
	switch r := res.(type) {
	case *mcp.InitializeResult:
		return tasksInit{r}
	case legacyTools:
		return tasksTools{r}
	}
	return res
}

// taskTool is a listed tool with its execution (2025-11-25): every tool of
// a server may run as a task; search mode's own tools (without the
// server's _meta) may not.
type taskTool struct {
	*mcp.Tool
	Execution toolExecution `json:"execution"`
}

type toolExecution struct {
	TaskSupport string `json:"taskSupport"`
}

type tasksTools struct{ legacyTools }

func (r tasksTools) MarshalJSON() ([]byte, error) {
	type plain mcp.ListToolsResult
	tools := make([]taskTool, len(r.Tools))
	for i, t := range r.Tools {
		support := "forbidden"
		if _, ok := t.Meta[MetaServer]; ok {
			support = "optional"
		}
		tools[i] = taskTool{Tool: t, Execution: toolExecution{TaskSupport: support}}
	}
	return json.Marshal(struct {
		*plain
		cacheless
		Tools []taskTool `json:"tools"`
	}{plain: (*plain)(r.ListToolsResult), Tools: tools})
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
