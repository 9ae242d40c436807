package vaultstore

import (
	"context"
	"fmt"
	"net/http"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// checkMount makes sure the mount is a KV version 2 engine before the first
// request that uses it. On a KV v1 mount the KV v2 paths are plain keys:
// a write lands at <mount>/data/mcpbus/… yet is reported as failed, a
// delete (of <mount>/metadata/…) removes nothing, a list finds nothing.
// It asks sys/internal/ui/mounts/<mount>, as the vault CLI does, which any
// token with a capability under the mount may read. A token whose policy
// does not allow it is not refused for that: the check is skipped. A mount
// found wrong is checked again on the next request, so converting it
// (vault kv enable-versioning) needs no restart.
func (s *Store) checkMount(ctx context.Context) error {
	if s.kvChecked.Load() {
		return nil
	}
	p := "sys/internal/ui/mounts/" + s.cfg.Mount
	sec, err := s.client.Logical().ReadWithContext(ctx, p)
	switch {
	case invalidToken(err):
		return err // the caller maps it, and logs in again with AppRole
	case err != nil && statusOf(err) >= 400 && statusOf(err) < 500 && statusOf(err) != http.StatusTooManyRequests:
		// Not allowed (or not there): the request itself will say.
		s.log.Debug("cannot check the Vault mount's KV version", "mount", s.cfg.Mount, "status", statusOf(err))
		s.kvChecked.Store(true)
		return nil
	case err != nil:
		return mapError(err, p, "checking the Vault mount")
	case sec == nil || sec.Data == nil:
		s.kvChecked.Store(true)
		return nil
	}
	typ, _ := sec.Data["type"].(string)
	var version string
	if opts, ok := sec.Data["options"].(map[string]any); ok {
		version, _ = opts["version"].(string)
	}
	if typ != "kv" || version != "2" {
		if version == "" {
			version = "1"
		}
		what := fmt.Sprintf("a %q secrets engine", typ)
		if typ == "kv" {
			what = "KV version " + version
		}
		return apierr.Newf(apierr.Internal,
			"the Vault mount %s/ is %s: mcpbus keeps its records in a KV version 2 engine (vault kv enable-versioning %s, or set MCPBUS_VAULT_MOUNT to a KV v2 mount)",
			s.cfg.Mount, what, s.cfg.Mount)
	}
	s.kvChecked.Store(true)
	return nil
}
