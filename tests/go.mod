module github.com/mcpbus/mcpbus/tests

go 1.26.8

require github.com/mcpbus/mcpbus/libs v0.0.0

replace github.com/mcpbus/mcpbus/libs => ../libs

require github.com/mcpbus/mcpbus/services/runner v0.0.0

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace github.com/mcpbus/mcpbus/services/runner => ../services/runner
