package service_test

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/service"
)

// --pprof-addr serves the heap profile on loopback, refuses other
// addresses, and does nothing when empty.
func TestStartPprof(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, bad := range []string{"0.0.0.0:0", "192.0.2.1:6060", ":6060", "nohost"} {
		if stop, err := service.StartPprof(bad, log); err == nil {
			stop()
			t.Fatalf("--pprof-addr %q accepted", bad)
		}
	}
	if stop, err := service.StartPprof("", log); err != nil {
		t.Fatal(err)
	} else {
		stop()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop, err := service.StartPprof(addr, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://%s/debug/pprof/heap?debug=1", addr))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "heap profile") {
		t.Fatalf("heap profile: %d %.200s", resp.StatusCode, body)
	}
}
