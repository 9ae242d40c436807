package llmtest

import (
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// openai serves POST /v1/chat/completions.
func (s *Server) openai(w http.ResponseWriter, r *http.Request) {
	body, reply, status := s.receive("openai", r, func(key string) bool {
		return r.Header.Get("Authorization") == "Bearer "+key
	})
	switch status {
	case http.StatusUnauthorized:
		openaiError(w, status, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		return
	case http.StatusBadRequest:
		openaiError(w, status, "invalid_request_error", "", "could not read the request body")
		return
	}
	var req struct {
		Model         string `json:"model"`
		Stream        bool   `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		openaiError(w, http.StatusBadRequest, "invalid_request_error", "", "We could not parse the JSON body of your request.")
		return
	}
	if reply.Status != 0 && reply.Status != http.StatusOK {
		if reply.RetryAfter != "" {
			w.Header().Set("Retry-After", reply.RetryAfter)
		}
		switch {
		case reply.Code != "":
			openaiError(w, reply.Status, reply.Code, reply.Code, reply.message(http.StatusText(reply.Status)))
		case reply.Status == http.StatusTooManyRequests:
			openaiError(w, reply.Status, "requests", "rate_limit_exceeded", reply.message("Rate limit reached for requests. Please try again later."))
		case reply.Status >= 500:
			openaiError(w, reply.Status, "server_error", "", reply.message("The server had an error while processing your request."))
		default:
			openaiError(w, reply.Status, "invalid_request_error", "", reply.message(http.StatusText(reply.Status)))
		}
		return
	}
	id := s.nextID("chatcmpl-llmtest")
	created := time.Now().Unix()
	u := reply.usage()
	usage := obj{"prompt_tokens": u.InputTokens, "completion_tokens": u.OutputTokens, "total_tokens": u.InputTokens + u.OutputTokens}
	finish := "stop"
	if len(reply.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	if reply.Truncated {
		finish = "length"
	}
	ids := s.callIDs(reply.ToolCalls, "call_")

	if !req.Stream {
		if !sleep(r, reply.Delay) {
			return
		}
		if reply.Malformed {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id": "`+id+`", "object": "chat.completion", "choices": [{"index": 0, "message": `)
			return
		}
		msg := obj{"role": "assistant", "content": nil, "refusal": nil, "annotations": []any{}}
		if reply.Text != "" {
			msg["content"] = reply.Text
		}
		if len(reply.ToolCalls) > 0 {
			calls := make([]obj, len(reply.ToolCalls))
			for i, c := range reply.ToolCalls {
				calls[i] = obj{"id": ids[i], "type": "function", "function": obj{"name": c.Name, "arguments": c.Arguments}}
			}
			msg["tool_calls"] = calls
		}
		writeJSON(w, http.StatusOK, obj{
			"id": id, "object": "chat.completion", "created": created, "model": req.Model,
			"choices":            []obj{{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
			"usage":              usage,
			"service_tier":       "default",
			"system_fingerprint": "fp_llmtest",
		})
		return
	}

	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	e := newSSE(w, r, reply.Delay)
	chunk := func(delta obj, finish any) obj {
		c := obj{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"service_tier": "default", "system_fingerprint": "fp_llmtest",
			"choices": []obj{{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		}
		if includeUsage {
			c["usage"] = nil
		}
		return c
	}
	if !e.send("", chunk(obj{"role": "assistant", "content": "", "refusal": nil}, nil)) {
		return
	}
	if reply.StreamError != "" {
		e.send("", obj{"error": obj{"message": reply.message("stream failed"), "type": reply.StreamError, "param": nil, "code": nil}})
		return
	}
	if reply.Malformed {
		e.raw("", `{"id": "`+id+`", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "tru`)
		return
	}
	for _, word := range words(reply.Text) {
		if !e.send("", chunk(obj{"content": word}, nil)) {
			return
		}
	}
	if reply.Cut {
		return
	}
	for i, c := range reply.ToolCalls {
		first := obj{"index": i, "id": ids[i], "type": "function", "function": obj{"name": c.Name, "arguments": ""}}
		if !e.send("", chunk(obj{"tool_calls": []obj{first}}, nil)) {
			return
		}
		for _, piece := range split(c.Arguments, 3) {
			if piece == "" {
				continue
			}
			if !e.send("", chunk(obj{"tool_calls": []obj{{"index": i, "function": obj{"arguments": piece}}}}, nil)) {
				return
			}
		}
	}
	if !e.send("", chunk(obj{}, finish)) {
		return
	}
	if includeUsage {
		if !e.send("", obj{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"service_tier": "default", "system_fingerprint": "fp_llmtest",
			"choices": []obj{}, "usage": usage,
		}) {
			return
		}
	}
	e.raw("", "[DONE]")
}

// openaiError writes the OpenAI error body: {"error":{message,type,param,code}}.
func openaiError(w http.ResponseWriter, status int, typ, code, message string) {
	var c any
	if code != "" {
		c = code
	}
	writeJSON(w, status, obj{"error": obj{"message": message, "type": typ, "param": nil, "code": c}})
}
