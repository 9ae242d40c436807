// Package registry is the registry service of mcpbus.
package registry
