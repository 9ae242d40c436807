package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// HandlerFunc answers one request of a micro endpoint: the result is sent as
// JSON ([]byte as it is), an error as the error contract.
type HandlerFunc func(ctx context.Context, req micro.Request) (any, error)

// JSONHandler adapts h to micro. Each request runs on its own goroutine (a
// slow request never holds up the endpoint) with the caller's trace context;
// a panic becomes INTERNAL_ERROR instead of killing the service.
func JSONHandler(log *slog.Logger, h HandlerFunc) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		go func() {
			defer func() {
				if p := recover(); p != nil {
					log.Error("handler panic", "subject", req.Subject(), "panic", fmt.Sprint(p))
					_ = RespondError(req, apierr.New(apierr.Internal, "internal error"))
				}
			}()
			Answer(req, h)
		}()
	})
}

// Answer runs h for req on the calling goroutine and replies, inside the
// request's consumer span.
func Answer(req micro.Request, h HandlerFunc) {
	ctx, span := ProcessSpan(context.Background(), req)
	// A handler that panics ends the span too, as a failure (JSONHandler
	// turns the panic into INTERNAL_ERROR); else the span would never end.
	var err error = errHandlerPanicked
	defer func() { EndProcess(span, err) }()
	var out any
	out, err = h(ctx, req)
	if err != nil {
		_ = RespondError(req, err)
		return
	}
	if raw, ok := out.([]byte); ok {
		_ = req.Respond(raw)
		return
	}
	_ = req.RespondJSON(out)
}

// errHandlerPanicked is the error of a request whose handler panicked.
var errHandlerPanicked = apierr.New(apierr.Internal, "internal error (the handler panicked)")

// Decode reads a request body into v, rejecting unknown fields (a typo should
// not silently drop a setting). An empty body leaves v as it is.
func Decode(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apierr.Wrap(apierr.Validation, "request body is not valid: "+err.Error(), err)
	}
	// More misses a stray closing bracket ({}}): only the end may follow.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return apierr.New(apierr.Validation, "request body has data after the JSON value")
	}
	return nil
}
