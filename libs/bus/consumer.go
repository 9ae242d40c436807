package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DropConsumer deletes an ordered consumer of stream once its reader is
// done: stopping it leaves the server-side consumer to its inactivity
// timeout (minutes), and readers come and go. It runs even when ctx has
// ended (the reader's end is often why), for at most wait; a consumer gone
// already is no error worth reporting.
func DropConsumer(ctx context.Context, js jetstream.JetStream, stream string, cons jetstream.Consumer, wait time.Duration) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	_ = js.DeleteConsumer(dctx, stream, info.Name)
}
