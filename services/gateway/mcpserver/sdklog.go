package mcpserver

import (
	"context"
	"log/slog"
	"strings"
)

// sdkLogger is the logger go-sdk's servers get: a catalog change notifies
// every session, and go-sdk warns once per session that has no stream to take
// the notification (a client that never opened the GET stream; it gets
// tools/list_changed from its next tools/list anyway). That is normal, not a
// warning: 12 such sessions made 48 WARN lines for 4 changes. Those records
// go out at Debug; every other record as it came.
func sdkLogger(l *slog.Logger) *slog.Logger { return slog.New(sdkLogHandler{l.Handler()}) }

type sdkLogHandler struct{ next slog.Handler }

// noStream reports whether r is go-sdk's "calling notifications/…: rejected
// by transport: undelivered message: stream not connected or already closed"
// (or "…: write to closed stream") of a session without a stream.
func noStream(r slog.Record) bool {
	return r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, "calling notifications/") &&
		(strings.HasSuffix(r.Message, "stream not connected or already closed") || strings.HasSuffix(r.Message, "write to closed stream"))
}

func (h sdkLogHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h sdkLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if !noStream(r) {
		return h.next.Handle(ctx, r)
	}
	if !h.next.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	d := slog.NewRecord(r.Time, slog.LevelDebug, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool { d.AddAttrs(a); return true })
	return h.next.Handle(ctx, d)
}

func (h sdkLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return sdkLogHandler{h.next.WithAttrs(as)}
}

func (h sdkLogHandler) WithGroup(name string) slog.Handler {
	return sdkLogHandler{h.next.WithGroup(name)}
}
