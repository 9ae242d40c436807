// Package security tries what a hostile local client would against mcpbus
// up's bus (an unauthenticated connection, an agent identity, another
// service's identity): every attempt must be refused by NATS.
package security
