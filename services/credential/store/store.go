// Package store is where the credential service keeps its secrets: one whole
// record per key, written at once, so a failed write never leaves half a
// record behind. A key is "<kind>/<uuid>" (the owner's kind: server,
// chat_profile, …), or a bare uuid for records stored before kinds existed.
package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// ErrNotFound is returned by Get when a key has no record.
var ErrNotFound = errors.New("no credentials stored")

// Store keeps one credential record per key (see CheckKey). An unreachable or sealed
// backend is reported as an *apierr.Error with SERVICE_UNAVAILABLE.
type Store interface {
	// Get returns the record of key and when it was last written, or ErrNotFound.
	Get(ctx context.Context, key string) (model.Credentials, time.Time, error)
	// Put replaces the record of key as a whole.
	Put(ctx context.Context, key string, creds model.Credentials) error
	// Delete removes the record of key; deleting a missing record is not an error.
	Delete(ctx context.Context, key string) error
	// Name names the backend ("file", "vault") for descriptions and logs.
	Name() string
}

// CheckID accepts only a canonical (lower-case, hyphenated) uuid: ids become
// file names and Vault paths, so nothing else may get through.
func CheckID(id string) error {
	u, err := uuid.Parse(id)
	if err != nil || u.String() != id {
		return apierr.Invalid("server_id", "server_id must be a uuid (lower-case, 8-4-4-4-12)")
	}
	return nil
}

// Key is the record key of id owned by kind: "<kind>/<id>".
func Key(kind model.CredentialKind, id string) string { return string(kind.Or()) + "/" + id }

// CheckKey accepts a record key: "<kind>/<uuid>" of a known kind, or a bare
// uuid (a record stored before kinds). Keys become file names and Vault
// paths, so nothing else may get through.
func CheckKey(key string) error {
	kind, id, ok := strings.Cut(key, "/")
	if !ok {
		return CheckID(key)
	}
	if kind == "" || !model.CredentialKind(kind).Valid() {
		return apierr.Invalid("server_id", "unknown credential kind "+strconv.Quote(kind))
	}
	return CheckID(id)
}

// Lister is a store that lists its record keys (both backends do): the
// runners' fingerprint feed reads every record.
type Lister interface {
	// List returns every record key ("<kind>/<id>", or a bare id of a record
	// stored before kinds), in no particular order.
	List(ctx context.Context) ([]string, error)
}

// ErrChanged is returned by a Versioned store's PutIf when the record is no
// longer at the version it was read at: another writer got in between.
var ErrChanged = errors.New("the credential record changed since it was read")

// Versioned is a store that several service instances may share (Vault):
// a read-modify-write reads the record's version and writes only if no one
// wrote it since, so that an instance never erases another's write. (The
// file store is one instance's: its writes are serialised by the service.)
type Versioned interface {
	// GetVersion is Get with the record's version (0 when there is none,
	// with ErrNotFound).
	GetVersion(ctx context.Context, key string) (model.Credentials, time.Time, uint64, error)
	// PutIf is Put, made only when the record is still at version (0: when
	// there is none); ErrChanged otherwise.
	PutIf(ctx context.Context, key string, creds model.Credentials, version uint64) error
}
