package filestore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

var _ store.Lister = (*Store)(nil)

// List returns the key of every record file: <dir>/<kind>/<id>.cred and the
// bare <dir>/<id>.cred of records stored before kinds. Other files (the
// store's key, the curve pair, temp files) are not records.
func (s *Store) List(ctx context.Context) ([]string, error) {
	var keys []string
	add := func(dir, prefix string) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := ctx.Err(); err != nil {
				return err
			}
			name, ok := strings.CutSuffix(e.Name(), Ext)
			if !ok || !e.Type().IsRegular() {
				continue
			}
			if key := prefix + name; store.CheckKey(key) == nil {
				keys = append(keys, key)
			}
		}
		return nil
	}
	if err := add(s.dir, ""); err != nil {
		return nil, apierr.Wrap(apierr.Internal, "listing the credential store failed", err)
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, apierr.Wrap(apierr.Internal, "listing the credential store failed", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if err := add(filepath.Join(s.dir, e.Name()), e.Name()+"/"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, apierr.Wrap(apierr.Internal, "listing the credential store failed", err)
		}
	}
	return keys, nil
}
