package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// conversationEvents streams one conversation's model.ChatEvents as
// Server-Sent Events (event: the event's kind, data: the event, id: its
// stream sequence), with the conventions of /api/v1/events: heartbeat
// comments, Last-Event-ID (or ?since=) to resume. ?replay=true starts from
// the conversation's oldest retained event instead of now. The stream stays
// open across turns until the client goes. The chat service says first
// whether the caller may follow them. An id that is not the caller's (nobody
// has it yet, or another principal does: the answer is the same, so the
// route tells nobody whether an id is taken) gets a stream that carries
// nothing until a send makes the id the caller's: a client may open the
// stream of a new id before its first message, and nothing is claimed for
// it meanwhile. No start goes before the first event of the caller's
// conversation: the events of an earlier one with the same id, deleted
// since, are not the caller's.
func (a *API) conversationEvents(w http.ResponseWriter, r *http.Request) {
	id, ok := conversationRef(w, r)
	if !ok {
		return
	}
	replay, err := boolQuery(r, "replay")
	if err != nil {
		writeError(w, err)
		return
	}
	after, err := a.client.ChatWatch(r.Context(), id)
	if apierr.Of(err) == apierr.NotFound {
		cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy, InactiveThreshold: time.Minute,
			FilterSubjects: []string{a.subj.Event("chat", id)}}
		// What was published before now is not the caller's (the id was
		// not): no replay; a resume is let through the gate.
		if err := resume(r, &cfg); err != nil {
			writeError(w, err)
			return
		}
		a.stream(w, r, cfg, a.onceOwned(r.Context(), id), nil)
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy, InactiveThreshold: time.Minute,
		FilterSubjects: []string{a.subj.Event("chat", id)}}
	if replay {
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	if err := resume(r, &cfg); err != nil {
		writeError(w, err)
		return
	}
	if after > 0 && (cfg.DeliverPolicy == jetstream.DeliverAllPolicy ||
		cfg.DeliverPolicy == jetstream.DeliverByStartSequencePolicy && cfg.OptStartSeq <= after) {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	a.stream(w, r, cfg, chatFrame, nil)
}

// onceOwned is the framer of a stream of an id that was not the caller's
// when it opened: an event is the caller's only if the chat service now
// says the id is (asked at each event until it does) and the event came
// after the caller's claim; any other is dropped unseen. Until then the
// stream carries only heartbeats, whoever else uses the id. The events
// already stored behind one when the answer is still no were published
// before it, so they are not the caller's either: they are dropped without
// asking (a resumed stream of another's busy id asks once per batch).
func (a *API) onceOwned(ctx context.Context, id string) framer {
	owned, after, skip := false, uint64(0), uint64(0)
	return func(m jetstream.Msg) (string, bool, bool) {
		md, err := m.Metadata()
		if err != nil {
			return "", false, false
		}
		if !owned {
			if skip > 0 {
				skip--
				return "", false, false
			}
			got, err := a.client.ChatWatch(ctx, id)
			switch {
			case apierr.Of(err) == apierr.NotFound:
				skip = md.NumPending
				return "", false, false
			case err != nil:
				// Unknown whose it is: end the stream (the client resumes
				// with Last-Event-ID and this event is judged again).
				return "", false, true
			}
			owned, after = true, got
		}
		if md.Sequence.Stream <= after {
			return "", false, false
		}
		return chatFrame(m)
	}
}

// chatFrame renders one chat event as an SSE frame. The kind becomes the
// event name only when it is a plain token: a newline would forge frames.
// The conversation's deletion is the stream's last frame: whoever takes the
// id next is another principal, whose events this stream must not carry.
func chatFrame(m jetstream.Msg) (string, bool, bool) {
	var head struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(m.Data(), &head); err != nil || head.Kind == "" || strings.ContainsAny(head.Kind, "\r\n:") {
		return "", false, false
	}
	last := head.Kind == model.ChatEventDeleted
	var buf bytes.Buffer
	if err := json.Compact(&buf, m.Data()); err != nil {
		return "", false, last
	}
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	return fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", seq, head.Kind, buf.Bytes()), true, last
}
