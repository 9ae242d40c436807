package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Gather sends one request to subject and collects every reply (a
// scatter-gather, as NATS micro discovery answers $SRV.INFO): until wait has
// passed, quiet after the last reply when quiet > 0, at once when no one
// listens (the server's no-responders status), or when ctx ends. Replies that
// do not decode as T are skipped. An error means the request could not be
// sent.
func Gather[T any](ctx context.Context, nc *nats.Conn, subject string, wait, quiet time.Duration) ([]T, error) {
	inbox := nc.NewRespInbox()
	ch := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, fmt.Errorf("gather %s: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("gather %s: %w", subject, err)
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var lull <-chan time.Time
	var out []T
	for {
		select {
		case m := <-ch:
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				return out, nil
			}
			var v T
			if json.Unmarshal(m.Data, &v) == nil {
				out = append(out, v)
			}
			if quiet > 0 {
				lull = time.After(quiet)
			}
		case <-lull:
			return out, nil
		case <-deadline.C:
			return out, nil
		case <-ctx.Done():
			return out, nil
		}
	}
}
