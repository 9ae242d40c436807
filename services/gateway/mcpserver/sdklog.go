package mcpserver

import (
	"context"
	"log/slog"
	"strings"
)

// sdkLogger is the gateway's logger as go-sdk gets it, with two kinds of its
// records one level down, at DEBUG:
//   - its INFO records: each session's connect and disconnect, and under
//     protocol 2026-07-28 every request is a session of its own (three lines
//     per request beside the access log);
//   - the warning it logs for every session without a GET stream when a
//     catalog change notifies all sessions. That is normal (such a client
//     learns of the change from its next tools/list): 12 sessions made 48 WARN
//     lines for 4 changes.
func sdkLogger(l *slog.Logger) *slog.Logger { return slog.New(sdkLogHandler{l.Handler()}) }

type sdkLogHandler struct{ next slog.Handler }

// noStream reports whether r is go-sdk's "calling notifications/…: rejected
// by transport: undelivered message: stream not connected or already closed"
// (or "…: write to closed stream") of a session without a stream.
func noStream(r slog.Record) bool {
	return r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, "calling notifications/") &&
		(strings.HasSuffix(r.Message, "stream not connected or already closed") || strings.HasSuffix(r.Message, "write to closed stream"))
}

// level is the level r goes out at.
func level(r slog.Record) slog.Level {
	if r.Level == slog.LevelInfo || noStream(r) {
		return slog.LevelDebug
	}
	return r.Level
}

func (h sdkLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	if l == slog.LevelInfo {
		l = slog.LevelDebug
	}
	return h.next.Enabled(ctx, l) // a WARN is judged as a WARN: its message is not known yet
}

func (h sdkLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if lvl := level(r); lvl != r.Level {
		if !h.next.Enabled(ctx, lvl) {
			return nil
		}
		r.Level = lvl
	}
	return h.next.Handle(ctx, r)
}

func (h sdkLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return sdkLogHandler{h.next.WithAttrs(as)}
}

func (h sdkLogHandler) WithGroup(name string) slog.Handler {
	return sdkLogHandler{h.next.WithGroup(name)}
}
