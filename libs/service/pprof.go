package service

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/mcpbus/mcpbus/libs/settings"
)

// RegisterPprofAddr adds --pprof-addr: where Go's profiling endpoints
// (/debug/pprof/) listen; empty (the default): nowhere. For measuring CPU
// and memory of a running process; it must stay on a loopback address,
// where it still answers every local user and every MCP server (their
// sandbox does not confine TCP): stacks, heap sites, the command line, and
// CPU spent on demand.
func RegisterPprofAddr(s *settings.Set, p *string) {
	s.String(p, "pprof-addr", "", "",
		"where Go's profiling endpoints /debug/pprof/ listen, e.g. 127.0.0.1:6060 (loopback only, without authentication: every local user and MCP server may read them); empty: none")
}

// StartPprof serves net/http/pprof on addr (a loopback address) until stop;
// with addr empty it does nothing.
func StartPprof(addr string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--pprof-addr %q: profiles show the process's internals; use a loopback address (127.0.0.1, ::1, localhost)", addr)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof endpoint stopped", "error", err)
		}
	}()
	log.Info("profiling endpoints listen", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}
