// Package credential is the credential service of mcpbus.
package credential
