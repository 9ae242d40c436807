package vaultstore

import (
	"context"
	"strings"

	vault "github.com/hashicorp/vault/api"

	"github.com/mcpbus/mcpbus/services/credential/store"
)

var _ store.Lister = (*Store)(nil)

// List returns every record key under <mount>/metadata/mcpbus/: the bare
// ids of records stored before kinds and <kind>/<id> one folder down (the
// policy of deploy/vault grants list there).
func (s *Store) List(ctx context.Context) ([]string, error) {
	top, err := s.list(ctx, "")
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, k := range top {
		kind, folder := strings.CutSuffix(k, "/")
		if !folder {
			if store.CheckKey(k) == nil {
				keys = append(keys, k)
			}
			continue
		}
		ids, err := s.list(ctx, kind+"/")
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if key := kind + "/" + id; store.CheckKey(key) == nil {
				keys = append(keys, key)
			}
		}
	}
	return keys, nil
}

// list returns the entries under mcpbus/<dir> (folders end with "/").
func (s *Store) list(ctx context.Context, dir string) ([]string, error) {
	p := s.cfg.Mount + "/metadata/" + pathPrefix + dir
	var sec *vault.Secret
	err := s.do(ctx, func() (err error) {
		sec, err = s.client.Logical().ListWithContext(ctx, p)
		return err
	})
	if err != nil {
		return nil, mapError(err, p, "listing credentials in Vault")
	}
	if sec == nil || sec.Data == nil { // nothing stored yet
		return nil, nil
	}
	raw, _ := sec.Data["keys"].([]any)
	out := make([]string, 0, len(raw))
	for _, k := range raw {
		if s, ok := k.(string); ok {
			out = append(out, s)
		}
	}
	return out, nil
}
