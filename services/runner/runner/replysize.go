package runner

import (
	"github.com/mcpbus/mcpbus/libs/apierr"
)

// replyHeadroom is what a reply's headers may take of the bus's max_payload.
const replyHeadroom = 4 << 10

// unsent is the error a caller gets in place of a reply the bus refused to
// carry (what, size bytes): a server's result over the bus's max_payload is
// otherwise dropped, and its caller waits out the whole deadline for nothing.
func (r *Runner) unsent(err error, what string, size int) error {
	if max := r.nc.MaxPayload(); int64(size) > max-replyHeadroom {
		return apierr.Newf(apierr.Validation, "%s is %d bytes, more than the bus carries (max_payload %d)", what, size, max)
	}
	return apierr.Wrap(apierr.Internal, "sending "+what, err)
}
