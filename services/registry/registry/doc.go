// Package registry is the registry service of mcpbus: search of the Official
// MCP Registry (GET /v0.1/servers) and Smithery (GET /servers), merged,
// de-duplicated, ranked and cached in JetStream KV, and install plans that
// turn a registry entry into a draft McpConfig plus the credentials it needs.
//
// Subjects (prefix mcp.v1 by default), micro service "mcpbus-registry":
//
//	mcp.v1.registry.search  model.RegistrySearchRequest → model.RegistrySearchReply
//	mcp.v1.registry.get     model.RegistryGetRequest    → model.InstallPlan
//
// Search and Get in client.go are the request helpers for other Go programs
// (the CLI). OfficialClient and SmitheryClient speak the registries' HTTP APIs.
package registry
