package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// httpError is what both SDKs' error types tell us.
type httpError struct {
	status  int
	header  http.Header
	message string
	// quota: a 429 of a spent quota (OpenAI's insufficient_quota), which
	// waiting does not lift.
	quota bool
	// contextFull: the request does not fit the model's context window
	// (contextExceeded).
	contextFull bool
}

// contextExceeded recognizes a provider's refusal of a request longer than
// the model's context window: OpenAI's code context_length_exceeded (its
// message, also vLLM's and others', says "maximum context length") and
// Anthropic's "prompt is too long: N tokens > M maximum".
func contextExceeded(status int, code, message string) bool {
	if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge {
		return false
	}
	m := strings.ToLower(message)
	return code == "context_length_exceeded" || strings.Contains(m, "maximum context length") ||
		strings.Contains(m, "context_length_exceeded") || strings.HasPrefix(m, "prompt is too long")
}

// retry runs attempt until it succeeds, fails for good, or the rate-limit
// retries run out. attempt reports whether it already streamed output (then
// no retry is possible) and classify maps its error to an httpError when the
// server answered one.
func retry(ctx context.Context, cfg Config, name string, attempt func() (streamed bool, err error), classify func(error) (httpError, bool)) error {
	for n := 0; ; n++ {
		streamed, err := attempt()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		he, ok := classify(err)
		if !ok {
			return classifyOther(name, cfg, err)
		}
		if cfg.APIKey != "" {
			// An error answer's body is quoted to the turn's user: a proxy
			// that echoes the request must not show them the profile's key.
			he.message = strings.ReplaceAll(he.message, cfg.APIKey, "[REDACTED]")
		}
		he.message = clipMessage(he.message)
		if !retryable(he.status) || he.quota {
			return statusError(name, he, err)
		}
		wait := backoff(n, he.header, cfg.MaxBackoff)
		if streamed || n >= cfg.MaxRetries || !fits(ctx, wait) {
			return rateLimited(wait, err)
		}
		if notice, ok := ctx.Value(retryNoticeKey{}).(func(*apierr.Error, int)); ok {
			notice(apierr.From(rateLimited(wait, err)), seconds(wait))
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return rateLimited(wait, err)
		}
	}
}

// maxErrorMessage bounds a provider's error message as the turn quotes it
// (its end, its error event, the conversation's log, the span): the API's
// own are a few hundred bytes, a provider may send megabytes.
const maxErrorMessage = 1024

// clipMessage is msg cut at maxErrorMessage bytes, at a character boundary,
// "…" marking the cut. It runs after the key's redaction, so the cut
// cannot split the key out of the redaction's sight.
func clipMessage(msg string) string {
	if len(msg) <= maxErrorMessage {
		return msg
	}
	cut := maxErrorMessage - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

type retryNoticeKey struct{}

// WithRetryNotice has a Step tell notice, before each wait of a retry, the
// RATE_LIMITED error ("Rate limited. Try again in N seconds.") it would
// return if it gave up then, and the seconds of the wait (as the message
// has them).
func WithRetryNotice(ctx context.Context, notice func(e *apierr.Error, retryAfter int)) context.Context {
	return context.WithValue(ctx, retryNoticeKey{}, notice)
}

// rateLimited is the error after giving up on a rate-limited request.
func rateLimited(wait time.Duration, err error) error {
	n := seconds(wait)
	unit := "seconds"
	if n == 1 {
		unit = "second"
	}
	return apierr.Wrap(apierr.RateLimited, fmt.Sprintf("Rate limited. Try again in %d %s.", n, unit), err)
}

func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status == 529 // 529: Anthropic "overloaded"
}

// backoff is the wait before retry n (0-based): Retry-After (or
// retry-after-ms) when the server sent one, else 1, 2, 4 … s; capped.
func backoff(n int, h http.Header, limit time.Duration) time.Duration {
	wait := time.Duration(math.Pow(2, float64(min(n, 16)))) * time.Second
	// A number is capped before it becomes a Duration: past 2^63 ns (or
	// +Inf) the conversion wraps to a negative wait, retried at once.
	dur := func(v, unit float64) time.Duration {
		return time.Duration(min(v*unit, float64(limit)))
	}
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms >= 0 {
		wait = dur(ms, float64(time.Millisecond))
	} else if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
			wait = dur(s, float64(time.Second))
		} else if t, err := http.ParseTime(v); err == nil {
			wait = max(time.Until(t), 0)
		}
	}
	return min(wait, limit)
}

// fits reports whether waiting d leaves the context alive.
func fits(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) > d
}

func seconds(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }

// statusError maps an HTTP error answer of the provider to the contract.
func statusError(name string, he httpError, err error) error {
	msg := he.message
	if msg == "" {
		msg = http.StatusText(he.status)
	}
	switch {
	case he.quota:
		// The field a spent quota has (OpenAI clients of /v1 read it as
		// insufficient_quota, not to be retried).
		return apierr.Wrap(apierr.RateLimited, fmt.Sprintf("%s: the account's quota is spent (%d): %s", name, he.status, msg), err).
			WithField(model.ChatQuotaField)
	case he.contextFull:
		// Every later step would fail alike: the conversation's whole log
		// is sent each time and never trimmed.
		return apierr.Wrap(apierr.Validation, fmt.Sprintf("The conversation is too long for the model's context window; "+
			"start a new conversation (this one cannot go on: its whole history is sent at every step). %s said (%d): %s", name, he.status, msg), err).
			WithField(model.ChatContextField)
	case he.status == http.StatusUnauthorized || he.status == http.StatusForbidden:
		return apierr.Wrap(apierr.Unauthorized, fmt.Sprintf("%s rejected the API key (%d): %s", name, he.status, msg), err)
	case he.status == http.StatusNotFound:
		return apierr.Wrap(apierr.NotFound, fmt.Sprintf("%s: not found (404): %s", name, msg), err)
	case he.status == http.StatusBadRequest || he.status == http.StatusUnprocessableEntity || he.status == http.StatusRequestEntityTooLarge:
		return apierr.Wrap(apierr.Validation, fmt.Sprintf("%s refused the request (%d): %s", name, he.status, msg), err)
	case he.status >= 500:
		return apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("%s is unavailable: server error %d: %s", name, he.status, msg), err)
	}
	return apierr.Wrap(apierr.Internal, fmt.Sprintf("%s answered %d: %s", name, he.status, msg), err)
}

// classifyOther maps an error without HTTP status: a network failure, or a
// reply that could not be decoded.
func classifyOther(name string, cfg Config, err error) error {
	if errors.Is(err, errTooLarge) {
		return apierr.Wrap(apierr.Internal, fmt.Sprintf("%s sent more than the chat takes (%v); the step was stopped", name, err), err)
	}
	var ue *url.Error
	var ne net.Error
	if errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		// Without a base URL the provider's default address was used; the
		// wrapped error names the URL dialed.
		if cfg.BaseURL == "" {
			return apierr.Wrap(apierr.Network, fmt.Sprintf("%s is unavailable: %v", name, err), err)
		}
		return apierr.Wrap(apierr.Network, fmt.Sprintf("%s at %s is unavailable: %v", name, cfg.BaseURL, err), err)
	}
	return apierr.Wrap(apierr.Internal, fmt.Sprintf("malformed reply from %s: %v", name, err), err)
}
