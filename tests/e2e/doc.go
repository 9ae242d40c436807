// Package e2e holds the end-to-end tests of mcpbus against real published MCP
// servers (@modelcontextprotocol/server-everything and server-filesystem from
// tests/npm), real clients (plain nats.go, the `nats` npm package under node,
// the mcpbus CLI) and a real runner on an embedded NATS server.
//
// The npm packages are pinned in tests/npm/package.json; install them once
// with `make npm-deps`. The tests fail, not skip, when they are missing.
package e2e
