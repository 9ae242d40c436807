//go:build !unix

package secretfile

import "os"

// PrivateDir makes dir (0700, with its missing parents); where file
// ownership is not unix's, nothing more is checked.
func PrivateDir(dir string) error { return os.MkdirAll(dir, 0o700) }
