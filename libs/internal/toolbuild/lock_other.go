//go:build !unix

package toolbuild

import "context"

// lockFile does nothing here: concurrent builds may then both compile, and the atomic rename
// still keeps the cached binary whole.
func lockFile(context.Context, string) (func(), error) { return func() {}, nil }
