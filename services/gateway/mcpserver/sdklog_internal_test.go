package mcpserver

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// go-sdk's INFO lines (a session per request under 2026-07-28) show at
// DEBUG only; its warnings and errors stay as they are.
func TestSDKLoggerDemotesInfo(t *testing.T) {
	var info, debug bytes.Buffer
	atInfo := sdkLogger(slog.New(slog.NewTextHandler(&info, &slog.HandlerOptions{Level: slog.LevelInfo})))
	atDebug := sdkLogger(slog.New(slog.NewTextHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug}))).With("k", "v")
	for _, l := range []*slog.Logger{atInfo, atDebug} {
		l.Info("server session connected")
		l.Warn("something odd")
	}
	if strings.Contains(info.String(), "session connected") || !strings.Contains(info.String(), "level=WARN msg=\"something odd\"") {
		t.Fatalf("at INFO:\n%s", info.String())
	}
	if !strings.Contains(debug.String(), "level=DEBUG msg=\"server session connected\" k=v") || !strings.Contains(debug.String(), "level=WARN") {
		t.Fatalf("at DEBUG:\n%s", debug.String())
	}
}
