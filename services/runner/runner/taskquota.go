package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// DefaultTaskMaxPerPrincipal bounds the tasks one principal has in KV
// mcp_tasks (Options.TaskMaxPerPrincipal): without it one key with the call
// scope filled the bucket (a record of up to 4 MiB each, kept for the
// retention).
const DefaultTaskMaxPerPrincipal = 1000

// ownerPrefix marks a task's owner entry in KV mcp_tasks,
// own.<principal hash>.<task id>: written with the task and again when it
// ends (taskstore.go), so it expires with the record; counting a
// principal's entries is cheap where counting its records would read every
// task. The principal id is hashed: it may hold what a key may not.
const ownerPrefix = "own."

func ownerKeys(principalID string) string {
	sum := sha256.Sum256([]byte(principalID))
	return ownerPrefix + hex.EncodeToString(sum[:12]) + "."
}

// isOwnerKey tells an owner entry from a task record.
func isOwnerKey(key string) bool { return strings.HasPrefix(key, ownerPrefix) }

// checkQuota refuses a new task of principalID when it has max already
// (within the retention). Creates at the same instant may pass it together:
// the bound holds within their number.
func (t *taskStore) checkQuota(ctx context.Context, principalID string, max int) error {
	keys, err := t.kv.ListKeysFiltered(ctx, ownerKeys(principalID)+"*")
	if err != nil {
		return apierr.Wrap(apierr.ServiceUnavailable, "counting the caller's tasks", err)
	}
	defer func() { _ = keys.Stop() }()
	n := 0
	for range keys.Keys() {
		if n++; n >= max {
			return apierr.Newf(apierr.RateLimited, "you have %d tasks kept (the most one principal may have): wait for them to expire or ask an admin", max)
		}
	}
	return nil
}
