package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// controlEach runs c on every replica of slug (control.<slug>.all, which
// each hears) and answers for them all: a start, stop or restart means the
// server, and the control subject, the replicas' queue group, reaches one of
// them. Who is asked to answer is who answers a status there within
// ownerProbeTimeout: a replica whose runner is down or cut off is not waited
// for (its lease lapses and another runner starts it, with what is stored
// then). Every replica that hears c does it once, whether or not it answered
// the status. The reply is the status of one replica (for IfRunning, one
// that restarted when one did); an error of any replica is the answer,
// saying how many did it; so is a replica that does not answer within
// timeout. ok is false when no replica answers there (runners of an older
// build serve only the control subject).
func (r *Runner) controlEach(ctx context.Context, slug string, c controlRequest, requestID string, timeout time.Duration) (st model.Status, ok bool, err error) {
	probe, err := r.gatherControl(ctx, slug, controlRequest{Verb: "status"}, requestID, ownerProbeTimeout, r.replicasHeld(slug))
	if err != nil {
		return st, true, err
	}
	owners := 0
	var refused error
	for _, m := range probe {
		if e := bus.ReplyError(m); e != nil {
			refused = e // being let go here: "no longer managed here"
			continue
		}
		owners++
	}
	switch {
	case owners == 0 && refused != nil:
		return st, true, refused
	case owners == 0:
		return st, false, nil
	}
	replies, err := r.gatherControl(ctx, slug, c, requestID, timeout, owners)
	if err != nil {
		return st, true, err
	}
	var done []model.Status
	var failed *apierr.Error
	for _, m := range replies {
		var one model.Status
		switch e := bus.ReplyError(m); {
		case e != nil:
			if failed == nil {
				failed = e
			}
		case json.Unmarshal(m.Data, &one) == nil:
			done = append(done, one)
		}
	}
	if failed != nil {
		if owners == 1 && len(replies) == 1 {
			return st, true, failed
		}
		return st, true, apierr.New(failed.Code, fmt.Sprintf("%s (%s of server %s: %d of %d replicas did it)",
			failed.Message, c.Verb, slug, len(done), max(owners, len(replies)))).WithField(failed.Field)
	}
	if len(done) < owners {
		return st, true, apierr.Newf(apierr.Network, "%s of server %s: %d of its %d replicas answered within %s; the others may still do it",
			c.Verb, slug, len(done), owners, timeout)
	}
	st = done[0]
	for _, one := range done {
		if c.IfRunning && (one.State == model.StateRunning || one.State == model.StateStarting) {
			st = one // restarted
			break
		}
	}
	return st, true, nil
}

// gatherControl sends c to control.<slug>.all and collects the replies until
// enough have come (enough > 0), wait has passed, ctx ends, or no one
// listens there.
func (r *Runner) gatherControl(ctx context.Context, slug string, c controlRequest, requestID string, wait time.Duration, enough int) ([]*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	inbox := r.nc.NewRespInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := r.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, apierr.Wrap(apierr.Network, "subscribing for the replicas' answers", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	msg := nats.NewMsg(r.subj.ControlAll(slug))
	msg.Reply = inbox
	if requestID != "" {
		msg.Header.Set(bus.HeaderRequestID, requestID) // one id end to end
	}
	msg.Data, _ = json.Marshal(c)
	bus.PrepareHeaders(ctx, msg) // the replicas work no longer than this waits
	if err := r.nc.PublishMsg(msg); err != nil {
		return nil, bus.FromNATS(err, msg.Subject)
	}
	var out []*nats.Msg
	for {
		select {
		case m := <-ch:
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				return out, nil // no responders
			}
			out = append(out, m)
			if enough > 0 && len(out) >= enough {
				return out, nil
			}
		case <-ctx.Done():
			return out, nil
		}
	}
}
