// Package schema holds the contract tests of schemas/: every JSON Schema
// compiles, the AsyncAPI document refers only to what exists, and real
// messages of a running runner match their schemas.
package schema
