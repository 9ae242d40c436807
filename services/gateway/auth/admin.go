package auth

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// AdminKeyFile is the name of the bootstrap admin key in the data dir.
const AdminKeyFile = "admin.key"

// EnsureAdminKey makes sure <dataDir>/admin.key holds a valid admin key: the
// key in the file is kept while it authenticates with the admin scope;
// otherwise (first start, a revoked key, a fresh bucket) a new admin key is
// created and written, readable by the owner only. created tells the caller
// to say where the new key is.
func EnsureAdminKey(ctx context.Context, store *KeyStore, dataDir string) (path string, created bool, err error) {
	if dataDir == "" {
		return "", false, errors.New("auth: a data dir is required for the admin key")
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", false, fmt.Errorf("auth: data dir: %w", err)
	}
	path = filepath.Join(dataDir, AdminKeyFile)
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		p, aerr := store.Authenticate(ctx, strings.TrimSpace(string(data)))
		clear(data)
		if aerr == nil && p.Can(ScopeAdmin) {
			// Whoever edited the file may have widened it: keep it private.
			if err := os.Chmod(path, 0o600); err != nil {
				return "", false, fmt.Errorf("auth: %s: %w", path, err)
			}
			return path, false, nil
		}
		if aerr != nil && apierr.Of(aerr) != apierr.Unauthorized {
			// The store did not answer: the key may be fine, keep it.
			return "", false, fmt.Errorf("auth: checking the admin key: %w", aerr)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("auth: reading %s: %w", path, err)
	}
	key, err := store.Create(ctx, model.KeyCreateRequest{Name: "admin (bootstrap)", Scopes: []string{ScopeAdmin}})
	if err != nil {
		return "", false, fmt.Errorf("auth: creating the admin key: %w", err)
	}
	if err := writePrivate(path, []byte(key.Key+"\n")); err != nil {
		return "", false, err
	}
	return path, true, nil
}

// writePrivate replaces path with data atomically, mode 0600 from the start.
func writePrivate(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".admin.key-*")
	if err != nil {
		return fmt.Errorf("auth: writing the admin key: %w", err)
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }() // no-op after the rename
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return fmt.Errorf("auth: writing the admin key: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("auth: writing the admin key: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("auth: writing the admin key: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("auth: writing the admin key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("auth: writing the admin key: %w", err)
	}
	return nil
}
