package chat

import (
	"context"
	"fmt"
	"github.com/mcpbus/mcpbus/libs/access"
	"path"
	"time"

	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/libs/settings"
	"github.com/mcpbus/mcpbus/services/chat/approvals"
	"github.com/mcpbus/mcpbus/services/chat/loop"
)

// Definition is the chat service's row of the service table.
func Definition() service.Definition {
	return service.Definition{Name: "chat", Version: Version,
		Summary: "the agent loop: durable conversations with an LLM that call MCP tools over the bus; profiles; approvals",
		Options: func() service.Options { return &Options{} }}
}

// Register adds the service's settings.
func (o *Options) Register(s *settings.Set) {
	s.Duration(&o.CallTimeout, "chat-call-timeout", "", loop.DefaultCallTimeout, "how long one tool call of a chat turn may take")
	s.Strings(&o.TaskTools, "chat-task-tools", "", nil, "globs of the namespaced tools (<server>__<tool>) whose calls run as durable tasks: they survive a chat instance's death without being run twice, but their servers cannot ask the user for input")
	s.Duration(&o.TaskTimeout, "chat-task-timeout", "", loop.DefaultTaskTimeout, "how long a chat turn waits for a tool call run as a task (then it is cancelled)")
	s.Int(&o.ResultBudget, "chat-result-budget", "", loop.DefaultResultBudget, "bytes of a tool result the model sees; larger ones are cut head+tail and readable through read_result")
	s.Duration(&o.ApprovalTimeout, "chat-approval-timeout", "", approvals.DefaultTimeout, "how long a tool call waits for an approval before it is denied")
	s.Duration(&o.InputTimeout, "chat-input-timeout", "", approvals.DefaultTimeout, "how long a server's request for input (elicitation) waits for the user's answer before it is cancelled (the tool call's timeouts stop meanwhile; keep it below the runner's --input-timeout)")
	s.Duration(&o.LeaseTTL, "chat-lease-ttl", "", DefaultLeaseTTL, "how long a turn whose instance died waits before another instance resumes it")
	s.Duration(&o.LogMaxAge, "chat-log-max-age", "", 0, "drop conversation entries older than this (0: keep until deleted)")
	s.Int(&o.PrincipalQuotaMiB, "chat-principal-quota", "", DefaultPrincipalQuotaMiB, "MiB of the shared conversation log one user's conversations may hold; past it their sends are refused until they delete some (0: no bound)")
}

// DefaultPrincipalQuotaMiB is --chat-principal-quota's default: a few users
// at it leave the log (2 GiB) room for everyone else.
const DefaultPrincipalQuotaMiB = 256

// Validate checks the settings.
func (o *Options) Validate() error {
	for flag, d := range map[string]time.Duration{"chat-call-timeout": o.CallTimeout, "chat-approval-timeout": o.ApprovalTimeout,
		"chat-input-timeout": o.InputTimeout, "chat-task-timeout": o.TaskTimeout,
		"chat-lease-ttl": o.LeaseTTL, "chat-log-max-age": o.LogMaxAge} {
		if d < 0 {
			return fmt.Errorf("--%s %s must not be negative", flag, d)
		}
	}
	if o.LeaseTTL != 0 && o.LeaseTTL < time.Second {
		return fmt.Errorf("--chat-lease-ttl %s is too short (at least 1s)", o.LeaseTTL)
	}
	for _, g := range o.TaskTools {
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("--chat-task-tools %q is not a valid glob", g)
		}
	}
	if o.ResultBudget < 0 {
		return fmt.Errorf("--chat-result-budget %d must not be negative", o.ResultBudget)
	}
	if o.PrincipalQuotaMiB < 0 {
		return fmt.Errorf("--chat-principal-quota %d must not be negative", o.PrincipalQuotaMiB)
	}
	return nil
}

// Build makes the service from its settings and the host's.
func (o *Options) Build(_ context.Context, env service.Env) (service.Service, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	opts := *o
	opts.Prefix, opts.Logger, opts.Replicas = env.Prefix, env.Logger, env.Replicas
	w, err := env.AuditWriter(string(access.Chat))
	if err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}
	opts.Audit = w
	return New(env.Conn, opts)
}
