package mcpserver

import (
	"context"
	"log/slog"
)

// sdkLogger is the gateway's logger as go-sdk gets it: its INFO records one
// level down, at DEBUG. go-sdk logs each session's connect and disconnect at
// INFO, and under protocol 2026-07-28 every request is a session of its own:
// at INFO that would be three lines per request beside the access log.
func sdkLogger(l *slog.Logger) *slog.Logger { return slog.New(demoted{l.Handler()}) }

type demoted struct{ slog.Handler }

func demote(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

func (d demoted) Enabled(ctx context.Context, l slog.Level) bool {
	return d.Handler.Enabled(ctx, demote(l))
}

func (d demoted) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return d.Handler.Handle(ctx, r)
}

func (d demoted) WithAttrs(attrs []slog.Attr) slog.Handler {
	return demoted{d.Handler.WithAttrs(attrs)}
}

func (d demoted) WithGroup(name string) slog.Handler { return demoted{d.Handler.WithGroup(name)} }
