// Package config is the config service of mcpbus: the micro service
// mcpbus-config answering mcp.v1.config.{create,get,list,update,delete,
// enable,disable,import,export,history,rollback}. It owns the McpConfig
// records in the KV bucket mcp_configs (key = config id), reserves each slug
// in mcp_slugs so that several instances never hand one slug to two configs,
// moves secret values to the credential service before anything is stored,
// and publishes a config event after every change.
package config
