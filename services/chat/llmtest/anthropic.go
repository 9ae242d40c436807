package llmtest

import (
	"encoding/json"
	"io"
	"net/http"
)

// anthropic serves POST /v1/messages.
func (s *Server) anthropic(w http.ResponseWriter, r *http.Request) {
	body, reply, status := s.receive("anthropic", r, func(key string) bool {
		return r.Header.Get("X-Api-Key") == key
	})
	switch status {
	case http.StatusUnauthorized:
		anthropicError(w, status, "authentication_error", "invalid x-api-key")
		return
	case http.StatusBadRequest:
		anthropicError(w, status, "invalid_request_error", "could not read the request body")
		return
	}
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "request body is not valid JSON")
		return
	}
	if reply.Status != 0 && reply.Status != http.StatusOK {
		if reply.RetryAfter != "" {
			w.Header().Set("Retry-After", reply.RetryAfter)
		}
		switch {
		case reply.Status == http.StatusTooManyRequests:
			anthropicError(w, reply.Status, "rate_limit_error", reply.message("Number of request tokens has exceeded your per-minute rate limit."))
		case reply.Status == 529:
			anthropicError(w, reply.Status, "overloaded_error", reply.message("Overloaded"))
		case reply.Status >= 500:
			anthropicError(w, reply.Status, "api_error", reply.message("Internal server error"))
		default:
			anthropicError(w, reply.Status, "invalid_request_error", reply.message(http.StatusText(reply.Status)))
		}
		return
	}
	id := s.nextID("msg_llmtest")
	u := reply.usage()
	stop := "end_turn"
	if len(reply.ToolCalls) > 0 {
		stop = "tool_use"
	}
	if reply.Truncated {
		stop = "max_tokens"
	}
	ids := s.callIDs(reply.ToolCalls, "toolu_")

	if !req.Stream {
		if !sleep(r, reply.Delay) {
			return
		}
		if reply.Malformed {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id": "`+id+`", "type": "message", "content": [{"type": "text", "te`)
			return
		}
		content := []obj{}
		if reply.Text != "" {
			content = append(content, obj{"type": "text", "text": reply.Text})
		}
		for i, c := range reply.ToolCalls {
			content = append(content, obj{"type": "tool_use", "id": ids[i], "name": c.Name, "input": jsonArg(c.Arguments)})
		}
		writeJSON(w, http.StatusOK, obj{
			"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": content, "stop_reason": stop, "stop_sequence": nil,
			"usage": obj{
				"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens,
				"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "service_tier": "standard",
			},
		})
		return
	}

	e := newSSE(w, r, reply.Delay)
	if !e.send("message_start", obj{"type": "message_start", "message": obj{
		"id": id, "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": obj{
			"input_tokens": u.InputTokens, "output_tokens": 1,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "service_tier": "standard",
		},
	}}) {
		return
	}
	if reply.StreamError != "" {
		e.send("error", obj{"type": "error", "error": obj{"type": reply.StreamError, "message": reply.message("stream failed")}})
		return
	}
	if reply.Malformed {
		e.raw("content_block_start", `{"type": "content_block_start", "index": 0, "content_bl`)
		return
	}
	if !e.send("ping", obj{"type": "ping"}) {
		return
	}
	index := 0
	if reply.Text != "" {
		if !e.send("content_block_start", obj{"type": "content_block_start", "index": index, "content_block": obj{"type": "text", "text": ""}}) {
			return
		}
		for _, word := range words(reply.Text) {
			if !e.send("content_block_delta", obj{"type": "content_block_delta", "index": index, "delta": obj{"type": "text_delta", "text": word}}) {
				return
			}
		}
		if reply.Cut {
			return
		}
		if !e.send("content_block_stop", obj{"type": "content_block_stop", "index": index}) {
			return
		}
		index++
	}
	for i, c := range reply.ToolCalls {
		if !e.send("content_block_start", obj{"type": "content_block_start", "index": index, "content_block": obj{"type": "tool_use", "id": ids[i], "name": c.Name, "input": obj{}}}) {
			return
		}
		for _, piece := range append([]string{""}, split(c.Arguments, 3)...) {
			if !e.send("content_block_delta", obj{"type": "content_block_delta", "index": index, "delta": obj{"type": "input_json_delta", "partial_json": piece}}) {
				return
			}
		}
		if !e.send("content_block_stop", obj{"type": "content_block_stop", "index": index}) {
			return
		}
		index++
	}
	if !e.send("message_delta", obj{"type": "message_delta", "delta": obj{"stop_reason": stop, "stop_sequence": nil}, "usage": obj{"output_tokens": u.OutputTokens}}) {
		return
	}
	e.send("message_stop", obj{"type": "message_stop"})
}

// anthropicError writes the Anthropic error body: {"type":"error","error":{type,message}}.
func anthropicError(w http.ResponseWriter, status int, typ, message string) {
	w.Header().Set("Request-Id", "req_llmtest")
	writeJSON(w, status, obj{"type": "error", "error": obj{"type": typ, "message": message}, "request_id": "req_llmtest"})
}
