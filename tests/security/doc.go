// Package security tries what a hostile local client would against mcpbus
// up's bus (an unauthenticated connection, an agent identity, another
// service's identity): every attempt must be refused by NATS; and what a
// second user's API key tries through the gateway against another
// principal's work: refused as if it did not exist.
package security
