// Package chat is the module of the chat service: the agent loop that uses
// every MCP tool of mcpbus through the bus. chat/ is the service itself
// (mcp.v1.chat.*, one instance per running turn, takeover of the turns of a
// dead instance), cmd/chat its binary. The parts: provider/ (one Model
// interface over the OpenAI-compatible Chat Completions API and the
// Anthropic Messages API, streaming, tool calls, rate-limit retries),
// llmtest/ (a local server speaking both APIs with scripted replies, for
// tests), guard/ (repeated-call detector, per-server breaker, result cut),
// conversation/ (the durable conversation log on JetStream), profiles/
// (chat profiles on KV, API keys in the credential service), loop/ (the turn
// engine, resumable from the log), approvals/ (pending calls and decisions
// on KV), events/ (chat events on the bus, text deltas coalesced) and
// results/ (cut tool results in the object store).
package chat
