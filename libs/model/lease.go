package model

import "time"

// LeaseKeyPrefix starts the lease keys of KV mcp_owners:
// server.<slug>.<replica>, each holding a Lease.
const LeaseKeyPrefix = "server."

// Lease is the value of a lease key: which runner holds a server's replica
// since when. The runner holding it writes it (and renews it); the
// credential service and the gateway read it.
type Lease struct {
	Runner string `json:"runner"`
	// Key is the holder's bus identity (nkey public key): the credential
	// service answers cred.resolve for the server only to a request signed
	// with it.
	Key     string    `json:"key,omitempty"`
	Server  string    `json:"server"`
	Replica int       `json:"replica"`
	Since   time.Time `json:"since"`
}
