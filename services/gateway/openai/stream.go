package openai

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
)

// writeTimeout bounds each write to a client.
const writeTimeout = 10 * time.Second

// streamer writes a completion as Server-Sent Events of chunks. The 200 and
// the headers go out with the first chunk or keep-alive, so an error before
// any output is still answered with its own status.
type streamer struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	t       *turn
	created int64
	open    bool
}

func (s *streamer) write(frame string) error {
	if !s.open {
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no") // no proxy buffering
		s.w.WriteHeader(http.StatusOK)
		s.open, s.t.committed = true, true
		role := s.chunk(&Delta{Role: model.ChatRoleAssistant, Content: new(string)}, nil)
		frame = role + frame
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := s.w.Write([]byte(frame)); err != nil {
		return err
	}
	return s.rc.Flush()
}

// chunk renders one chunk as a data frame.
func (s *streamer) chunk(delta *Delta, finish *string) string {
	return s.frame(Completion{ID: "chatcmpl-" + s.t.conv, Object: "chat.completion.chunk", Created: s.created, Model: s.t.model,
		Choices: []Choice{{Delta: delta, FinishReason: finish}}})
}

func (s *streamer) frame(v any) string {
	data, _ := json.Marshal(v) // plain structs of strings and numbers: cannot fail
	return "data: " + string(data) + "\n\n"
}

// streamTurn relays the turn as chunks of its text, then a chunk with the
// finish reason (and one with the usage when asked), then [DONE]. An error
// after the stream opened is sent as OpenAI does: a data frame {"error": …}.
func (a *API) streamTurn(w http.ResponseWriter, r *http.Request, t *turn, includeUsage bool) {
	s := &streamer{w: w, rc: http.NewResponseController(w), t: t, created: time.Now().Unix()}
	done, err := a.follow(r.Context(), t,
		func(text string) error { return s.write(s.chunk(&Delta{Content: &text}, nil)) },
		func() error { return s.write(": keep-alive\n\n") })
	if errors.Is(err, errClientGone) {
		return
	}
	reason, e := finishReason(t, done, err)
	if e != nil {
		if !s.open {
			a.writeTurnError(w, t, e)
			return
		}
		_ = s.write(s.frame(errorBody{Error: e}))
		return
	}
	frames := s.chunk(&Delta{}, &reason)
	if includeUsage {
		frames += s.frame(Completion{ID: "chatcmpl-" + t.conv, Object: "chat.completion.chunk", Created: s.created, Model: t.model,
			Choices: []Choice{}, Usage: t.totalUsage()})
	}
	_ = s.write(frames + "data: [DONE]\n\n")
}
