// Package secretfile reads and creates the small private files mcpbus keeps
// keys in (the file store's AES key, the credential service's curve key, bus
// identities' nkey seeds): regular files only the owner can access, made
// once, and never swapped between the check and the read.
package secretfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Read reads the file at path, refusing one that is not a regular file, that
// group or others can access, or that is longer than limit bytes.
func Read(path string, limit int64) ([]byte, error) {
	lst, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !lst.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if perm := lst.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s is accessible by group or others (mode %04o); restrict it with chmod 600 %s", path, perm, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	// The file checked above must be the one opened (no swap in between).
	if st, err := f.Stat(); err != nil || !os.SameFile(st, lst) {
		return nil, fmt.Errorf("%s changed while it was opened", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is longer than %d bytes", path, limit)
	}
	return data, nil
}

// LoadOrCreate reads the file at path (as Read does) or, when it does not
// exist, creates it (0600) with the bytes make returns. Creation is
// exclusive and whole: the bytes are written to a temporary file that is
// then linked to path, so a reader never sees a half-written file, and when
// another process creates it at the same moment, its file wins and is read.
func LoadOrCreate(path string, limit int64, make func() ([]byte, error)) ([]byte, error) {
	data, err := Read(path, limit)
	if !errors.Is(err, fs.ErrNotExist) {
		return data, err
	}
	data, err = make()
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".new-*")
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	// CreateTemp makes the file 0600; a link fails when path exists.
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return Read(path, limit)
	} else if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	return data, nil
}

// Write replaces the file at path with data, 0600 from its first byte: a
// new file is written beside it and renamed over it, so an existing file's
// wider mode is not kept, a symlink at path is replaced rather than
// followed (its target is left alone), and a reader sees the old or the
// new content, never half of it.
func Write(path string, data []byte) error { return WriteMode(path, data, 0o600) }

// WriteMode is Write of a file with mode perm (given to the temporary file
// before its data, so the path never holds the data under another mode).
func WriteMode(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".new-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // nothing left after the rename
	err = tmp.Chmod(perm)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
