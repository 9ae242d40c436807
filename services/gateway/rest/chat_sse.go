package rest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/model"
)

// conversationEvents streams one conversation's model.ChatEvents as
// Server-Sent Events (event: the event's kind, data: the event, id: its
// stream sequence), with the conventions of /api/v1/events: heartbeat
// comments, Last-Event-ID (or ?since=) to resume. ?replay=true starts from
// the conversation's oldest retained event instead of now. The stream stays
// open across turns until the client goes. The chat service says first
// whether the caller may follow them: another's conversation is NOT_FOUND,
// and one nobody has yet becomes the caller's. No start goes before the
// first event of the caller's conversation: the events of an earlier one
// with the same id, deleted since, are not the caller's.
func (a *API) conversationEvents(w http.ResponseWriter, r *http.Request) {
	id, ok := conversationRef(w, r)
	if !ok {
		return
	}
	after, err := a.client.ChatWatch(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	replay, err := boolQuery(r, "replay")
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
