package runner

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/secretscan"
)

// FingerprintSource gives the credential service's fingerprint feed: keyed
// fingerprints of every stored secret value, of every server's, whichever
// runner runs it, if any. libs/credclient.Resolver implements it; a runner
// whose resolver does not looks for its own servers' values only.
type FingerprintSource interface {
	Fingerprints(ctx context.Context) (model.FingerprintFeed, error)
}

// Bounds of the feed's fetches: one fetch; the pause after a change event
// that gathers a burst of them (a config import writes many records) into
// one fetch; the first retry after a failure (doubled up to the interval).
const (
	feedTimeout  = 10 * time.Second
	feedSettle   = 100 * time.Millisecond
	feedRetryMin = time.Second
)

// followFeed keeps the runner's copy of the fingerprint feed current: at
// start, on every change event (events.cred.*, type changed) and every
// SecretFeedInterval (which also covers an event missed while the bus was
// away).
func (r *Runner) followFeed(ctx context.Context) {
	src, ok := r.opts.Resolver.(FingerprintSource)
	if !ok {
		return
	}
	kick := make(chan struct{}, 1)
	sub, err := r.nc.Subscribe(r.subj.Event("cred", "*"), func(m *nats.Msg) {
		var ev model.CredEvent
		if json.Unmarshal(m.Data, &ev) == nil && ev.Type == model.CredChanged {
			select {
			case kick <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		r.log.Warn("not following credential changes: the fingerprint feed is fetched periodically only", "error", err)
	} else {
		defer func() { _ = sub.Unsubscribe() }()
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	retry := feedRetryMin
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
			select {
			case <-time.After(feedSettle):
			case <-ctx.Done():
				return
			}
			select { // the events of the pause are covered by this fetch
			case <-kick:
			default:
			}
		case <-timer.C:
		}
		next := r.opts.SecretFeedInterval
		if err := r.fetchFeed(ctx, src); err != nil {
			level := r.log.Debug // no credential service yet (a start in progress)
			if apierr.Of(err) != apierr.ServiceUnavailable {
				level = r.log.Warn
			}
			level("fetching the secret fingerprint feed failed; retrying", "code", apierr.Of(err), "error", apierr.From(err).Message, "retry_in", retry)
			next, retry = retry, min(retry*2, r.opts.SecretFeedInterval)
		} else {
			retry = feedRetryMin
		}
		timer.Reset(next)
	}
}

// fetchFeed fetches the feed once and puts it in the scan's known values.
func (r *Runner) fetchFeed(ctx context.Context, src FingerprintSource) error {
	ctx, cancel := context.WithTimeout(ctx, feedTimeout)
	defer cancel()
	feed, err := src.Fingerprints(ctx)
	if err != nil {
		return err
	}
	known, err := secretscan.KnownFromSums(feed.Alg, feed.Key, feed.Sums, feed.Lengths)
	if err != nil {
		// Malformed, or made with another alg (a credential service of
		// another version): the last feed read stays in use.
		return apierr.Wrap(apierr.Internal, "the fingerprint feed cannot be used: "+err.Error(), err)
	}
	r.secrets.setFeed(known)
	if feed.Truncated {
		r.log.Warn("the secret fingerprint feed is truncated: some stored values are not looked for", "fingerprints", known.Len())
	}
	r.log.Debug("secret fingerprint feed fetched", "fingerprints", known.Len(), "records", feed.Records)
	return nil
}
