// Package chat is the module of the chat service (issue 14): the agent loop
// that uses every MCP tool of mcpbus through the bus. Work in progress, not
// yet a service and not wired into `mcpbus up`. Built so far: provider/ (one
// Model interface over the OpenAI-compatible Chat Completions API and the
// Anthropic Messages API, streaming, tool calls, rate-limit retries),
// llmtest/ (a local server speaking both APIs with scripted replies, for
// tests), guard/ (repeated-call detector, per-server breaker, result cut),
// conversation/ (the durable conversation log on JetStream), profiles/
// (chat profiles on KV, API keys in the credential service), loop/ (the turn
// engine, resumable from the log), approvals/ (pending calls and decisions
// on KV) and events/ (chat events on the bus, text deltas coalesced).
package chat
