package restarts

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// FailoverRetry is the retry hint of a call nobody answered: a runner's
// lease lives 5 s by default (--lease-ttl), after which another runner
// takes its servers over.
const FailoverRetry = 5 * time.Second

// NoOwner reports whether a failed call of a tool the catalog lists found no
// runner serving its server (no responders on its call subject): the owner
// is gone and the lease not taken over yet, or no runner is up. The tool is
// known, so this is an outage to retry, not an unknown tool.
func NoOwner(err error) bool { return errors.Is(err, nats.ErrNoResponders) }

// Unavailable is the error of such a call: SERVICE_UNAVAILABLE, saying to
// retry after model.RetryAfterSeconds(FailoverRetry) s.
func Unavailable(tool, server string) *apierr.Error {
	return apierr.Newf(apierr.ServiceUnavailable,
		"tool %s is temporarily unavailable: no runner is serving server %s right now (its runner is gone and no other has taken it over yet); retry after %d s",
		tool, server, model.RetryAfterSeconds(FailoverRetry))
}
