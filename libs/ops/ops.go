// Package ops serves the operations endpoint of an mcpbus process
// (--metrics-addr): /metrics for Prometheus, /healthz (the process is alive)
// and /readyz (every readiness check passes). It is the same for a service
// running alone and for `mcpbus up`; only the checks differ.
package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Check is one readiness condition: Err is nil when it holds, else an error
// whose text says briefly why not. Err runs on every /readyz request: it
// must answer at once (no I/O).
type Check struct {
	Name string
	Err  func() error
}

// Ready holds once ch is closed (a service's Ready channel).
func Ready(name string, ch <-chan struct{}) Check {
	return Check{Name: name, Err: func() error {
		select {
		case <-ch:
			return nil
		default:
			return errors.New("not ready yet")
		}
	}}
}

// NATS holds while nc is connected.
func NATS(name string, nc *nats.Conn) Check {
	return Check{Name: name, Err: func() error {
		if nc.IsConnected() {
			return nil
		}
		return fmt.Errorf("not connected (%s)", strings.ToLower(nc.Status().String()))
	}}
}

// Running holds until ctx ends: a stopping process is no longer ready.
func Running(ctx context.Context) Check {
	return Check{Name: "process", Err: func() error {
		if ctx.Err() != nil {
			return errors.New("stopping")
		}
		return nil
	}}
}

// Options configure a Server.
type Options struct {
	// Addr is where to listen (host:port; port 0 picks one).
	Addr string
	// Metrics serves /metrics (nil: /metrics is a 404).
	Metrics http.Handler
	Logger  *slog.Logger
}

// Server is a listening operations endpoint.
type Server struct {
	ln  net.Listener
	srv *http.Server
	log *slog.Logger

	mu     sync.RWMutex
	checks []Check
	set    bool // SetChecks was called

	served chan struct{}
}

// Timeouts of the endpoint: its answers are small and quick.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second // a scrape of many series
	idleTimeout       = time.Minute
	shutdownTimeout   = 3 * time.Second
)

// Start binds opts.Addr and serves in the background until Close. Until
// SetChecks is called, /readyz answers 503 "starting".
func Start(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", opts.Addr, err)
	}
	s := &Server{ln: ln, log: opts.Logger, served: make(chan struct{})}
	s.srv = &http.Server{
		Handler:           s.handler(opts.Metrics),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("operations endpoint stopped", "addr", s.Addr(), "error", err)
		}
	}()
	s.log.Info("operations endpoint listening", "addr", s.Addr(), "paths", "/metrics /healthz /readyz")
	return s, nil
}

// Addr is the address the endpoint listens on (the real port when 0 was asked).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// SetChecks replaces the readiness checks: /readyz answers 200 when all of
// them hold. A nil Server ignores it (no endpoint configured).
func (s *Server) SetChecks(checks ...Check) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks, s.set = checks, true
}

// Close stops serving, letting requests in flight finish for a moment. A
// nil Server ignores it.
func (s *Server) Close() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.served
}

func (s *Server) handler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { text(w, http.StatusOK, "ok") })
	mux.HandleFunc("GET /readyz", s.readyz)
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	return mux
}

// readyz answers 200 "ok" when every check holds, else 503 naming the
// checks that failed and why.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if reason := s.notReady(); reason != "" {
		text(w, http.StatusServiceUnavailable, "not ready: "+reason)
		return
	}
	text(w, http.StatusOK, "ok")
}

// notReady is why the process is not ready ("" when it is).
func (s *Server) notReady() string {
	s.mu.RLock()
	checks, set := s.checks, s.set
	s.mu.RUnlock()
	if !set {
		return "starting"
	}
	var failed []string
	for _, c := range checks {
		if err := c.Err(); err != nil {
			failed = append(failed, c.Name+": "+err.Error())
		}
	}
	return strings.Join(failed, "; ")
}

func text(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body+"\n")
}
