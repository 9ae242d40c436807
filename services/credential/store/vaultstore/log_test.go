package vaultstore_test

import (
	"io"
	"log/slog"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
