// Package config is the config service of mcpbus.
package config
