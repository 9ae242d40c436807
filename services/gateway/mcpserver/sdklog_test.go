package mcpserver

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/testkit"
)

func TestSDKLoggerDemotesNoStream(t *testing.T) {
	logs := &testkit.LogBuffer{}
	l := sdkLogger(slog.New(slog.NewTextHandler(logs, nil))).With("server", "mcpbus") // Info and up
	l.Warn("calling notifications/tools/list_changed: rejected by transport: undelivered message: stream not connected or already closed")
	l.Warn("calling notifications/tools/list_changed: rejected by transport: write to closed stream")
	l.Warn("calling notifications/tools/list_changed: session is closed")
	l.Error("something else")
	out := logs.String()
	if strings.Contains(out, "closed stream") || strings.Contains(out, "stream not connected") {
		t.Fatalf("the no-stream warning passed at Info level:\n%s", out)
	}
	if !strings.Contains(out, "level=WARN msg=\"calling notifications/tools/list_changed: session is closed\" server=mcpbus") ||
		!strings.Contains(out, "level=ERROR msg=\"something else\"") {
		t.Fatalf("other records changed:\n%s", out)
	}
}
