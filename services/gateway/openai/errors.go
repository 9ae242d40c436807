package openai

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Error is an OpenAI error object with the HTTP status it is answered with.
// OpenAI clients read {"error": {message, type, param, code}}, not the
// gateway's {code, message, field}.
type Error struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
	// NoRetry answers X-Should-Retry: false, which the OpenAI SDKs obey
	// before their default retry of 429 and 5xx.
	NoRetry bool `json:"-"`
	// Retry drops the X-Should-Retry: false of a turn that started: it
	// ran nothing, so the SDKs' own retry is safe.
	Retry bool `json:"-"`
	// RetryAfter, when not 0, is answered as Retry-After (seconds).
	RetryAfter int `json:"-"`
}

// errorBody is the JSON of an error answer (and of an error in a stream).
type errorBody struct {
	Error *Error `json:"error"`
}

func str(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// invalid is a 400 about the request's param.
func invalid(param, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Message: msg, Type: "invalid_request_error", Param: str(param)}
}

// modelNotFound is OpenAI's answer to an unknown model: here, a profile.
func modelNotFound(model string) *Error {
	return &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Param: str("model"), Code: str("model_not_found"),
		Message: "The model `" + model + "` does not exist: models are the chat profiles (GET /v1/models)"}
}

// errorType is OpenAI's type for an HTTP status.
func errorType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusConflict,
		http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	}
	return "server_error"
}

// fromBus turns an error of the bus (the contract) into an OpenAI error with
// the same HTTP status; the contract's code, lower-cased, is its code.
func fromBus(err error) *Error {
	e := apierr.From(err)
	status := e.Code.HTTPStatus()
	if e.Code == apierr.RateLimited && e.Field == model.ChatQuotaField {
		// OpenAI's own answer to a spent quota: a retry cannot succeed.
		return &Error{Status: status, Message: e.Message, Type: "insufficient_quota", Code: str("insufficient_quota"), NoRetry: true}
	}
	if e.Code == apierr.Validation && e.Field == model.ChatContextField {
		// OpenAI's own answer to a request past the context window, which
		// the SDKs and clients recognize by its code.
		return &Error{Status: status, Message: e.Message, Type: "invalid_request_error", Param: str("messages"), Code: str("context_length_exceeded")}
	}
	return &Error{Status: status, Message: e.Message, Type: errorType(status), Param: str(e.Field),
		Code: str(strings.ToLower(string(e.Code)))}
}

// fromTurn is fromBus for an error of a turn under way: the request's own
// key and model were good by then, so an authentication or not-found error
// is the profile's provider refusing its credentials or model, a server
// error (502) the client cannot fix, not theirs (401 or 404 would read to an
// OpenAI SDK as the client's key or model).
func fromTurn(err error) *Error {
	e := fromBus(err)
	switch e.Status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		e.Status, e.Type = http.StatusBadGateway, "server_error"
		e.Message = "the chat profile's model provider refused the turn: " + e.Message
	}
	return e
}

// writeError answers e.
func writeError(w http.ResponseWriter, e *Error) {
	switch {
	case e.NoRetry:
		w.Header().Set("X-Should-Retry", "false")
	case e.Retry:
		w.Header().Del("X-Should-Retry")
		w.Header().Del(ConversationHeader) // discarded
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, errorBody{Error: e})
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status, data = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding the reply failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
