module github.com/mcpbus/mcpbus/services/gateway

go 1.26.8

require github.com/mcpbus/mcpbus/libs v0.0.0

replace github.com/mcpbus/mcpbus/libs => ../../libs
