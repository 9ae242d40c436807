// Package store is where the credential service keeps the secrets of each
// server: one whole record per server id, written at once, so a failed write
// never leaves half a record behind.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// ErrNotFound is returned by Get when a server has no record.
var ErrNotFound = errors.New("no credentials stored")

// Store keeps one credential record per server id. An unreachable or sealed
// backend is reported as an *apierr.Error with SERVICE_UNAVAILABLE.
type Store interface {
	// Get returns the record of serverID and when it was last written, or ErrNotFound.
	Get(ctx context.Context, serverID string) (model.Credentials, time.Time, error)
	// Put replaces the record of serverID as a whole.
	Put(ctx context.Context, serverID string, creds model.Credentials) error
	// Delete removes the record of serverID; deleting a missing record is not an error.
	Delete(ctx context.Context, serverID string) error
	// Name names the backend ("file", "vault") for descriptions and logs.
	Name() string
}

// CheckID accepts only a canonical (lower-case, hyphenated) uuid: ids become
// file names and Vault paths, so nothing else may get through.
func CheckID(serverID string) error {
	u, err := uuid.Parse(serverID)
	if err != nil || u.String() != serverID {
		return apierr.Invalid("server_id", "server_id must be a uuid (lower-case, 8-4-4-4-12)")
	}
	return nil
}
