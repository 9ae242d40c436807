//go:build !unix

package vaulttest

import "context"

// lockFile does nothing here: concurrent builds may then both compile, and the atomic rename
// still keeps the cached binary whole.
func lockFile(context.Context, string) (func(), error) { return func() {}, nil }
