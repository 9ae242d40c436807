package runner

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// callAsTask answers a tool call that carries Mcp-Task: true with the handle
// of a task running it, as task.create does (the same checks: the tool in
// the catalog, the principal's own filter). Agents have no task verbs
// (libs/access), so their calls cannot become tasks either.
func (s *server) callAsTask(ctx context.Context, c caller, h nats.Header, token string, req micro.Request) error {
	var err error
	switch {
	case c.agent != "":
		err = apierr.Invalid(bus.HeaderTask, "agents cannot run tasks: call the tool without "+bus.HeaderTask)
	case token == "":
		err = apierr.Invalid(bus.HeaderTask, bus.HeaderTask+" needs a tool call subject (call.<server>.<tool>)")
	}
	if err != nil {
		_ = bus.RespondError(req, err)
		return err
	}
	// A KV write and a publish, after a start when the server's tools are
	// not known yet (createTask starts it, as the call would).
	ctx, cancel := context.WithTimeout(ctx, s.config().Runtime.StartTimeout.Or(s.r.opts.StartTimeout)+15*time.Second)
	defer cancel()
	tool := token // the subject's token; the catalog knows the original name
	s.mu.RLock()
	if t, ok := s.tools[token]; ok {
		tool = t.Name
	}
	s.mu.RUnlock()
	task, err := s.r.createTask(ctx, h, model.TaskCreateRequest{Server: s.slug, Tool: tool, Arguments: json.RawMessage(req.Data())})
	if err != nil {
		_ = bus.RespondError(req, err)
		return err
	}
	data, err := json.Marshal(task)
	if err != nil {
		err = apierr.Wrap(apierr.Internal, "encoding the task", err)
		_ = bus.RespondError(req, err)
		return err
	}
	return req.Respond(data)
}
