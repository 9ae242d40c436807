module github.com/mcpbus/mcpbus/tools/mcpbus

go 1.26.8

require github.com/mcpbus/mcpbus/libs v0.0.0

replace github.com/mcpbus/mcpbus/libs => ../../libs

require github.com/mcpbus/mcpbus/services/runner v0.0.0

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/term v0.47.0 // indirect
)

replace github.com/mcpbus/mcpbus/services/runner => ../../services/runner

require (
	github.com/mcpbus/mcpbus/services/config v0.0.0
	github.com/mcpbus/mcpbus/services/credential v0.0.0
	github.com/mcpbus/mcpbus/services/registry v0.0.0
)

replace (
	github.com/mcpbus/mcpbus/services/config => ../../services/config
	github.com/mcpbus/mcpbus/services/credential => ../../services/credential
	github.com/mcpbus/mcpbus/services/registry => ../../services/registry
)

require github.com/mcpbus/mcpbus/services/gateway v0.0.0

replace github.com/mcpbus/mcpbus/services/gateway => ../../services/gateway
