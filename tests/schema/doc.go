// Package schema holds the contract tests of schemas/: every JSON Schema
// compiles, the AsyncAPI document refers only to what exists, and real
// messages of the running system (every service, as `mcpbus up` runs them)
// match their schemas.
package schema
