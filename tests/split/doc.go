// Package split holds the split-deployment end-to-end test: a real
// nats-server with JetStream and every mcpbus service as its own OS process
// (`mcpbus serve credential|config|registry|runner|gateway`), driven through
// the mcpbus CLI, plain NATS, the gateway's /mcp (go-sdk client) and
// /mcp/invoke, and compared with the same flow against `mcpbus up`.
//
// The test binaries (mcpbus, nats-server and the go-sdk test MCP server of
// libs/testmcp) are built once by TestMain; the test is skipped under -short.
package split
