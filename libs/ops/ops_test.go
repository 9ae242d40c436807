package ops_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/ops"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// get asks the endpoint for path and returns the status and the body.
func get(t *testing.T, s *ops.Server, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + s.Addr() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func start(t *testing.T, metrics http.Handler) *ops.Server {
	t.Helper()
	s, err := ops.Start(ops.Options{Addr: "127.0.0.1:0", Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// waitReadyz polls /readyz until it answers status with a body containing want.
func waitReadyz(t *testing.T, s *ops.Server, status int, want string) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		code, body := get(t, s, "/readyz")
		return code == status && strings.Contains(body, want), "readyz: " + body
	})
}

// TestReadiness follows /readyz through a process's life: starting, a
// service not ready yet, ready, NATS lost, NATS back, stopping; /healthz
// says ok throughout.
func TestReadiness(t *testing.T) {
	ns, err := embednats.Start(embednats.Options{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			ns.Stop()
		}
	})
	nc, err := ns.ConnectTCP(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)

	s := start(t, nil)
	healthy := func() {
		t.Helper()
		if code, body := get(t, s, "/healthz"); code != http.StatusOK || body != "ok\n" {
			t.Errorf("healthz: %d %q, want 200 ok", code, body)
		}
	}
	healthy()
	if code, body := get(t, s, "/readyz"); code != http.StatusServiceUnavailable || body != "not ready: starting\n" {
		t.Errorf("readyz before any check: %d %q, want 503 starting", code, body)
	}

	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.SetChecks(ops.Ready("runner", ready), ops.NATS("nats", nc), ops.Running(ctx))
	if code, body := get(t, s, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "runner: not ready yet") || strings.Contains(body, "nats") {
		t.Errorf("readyz with the service not ready: %d %q", code, body)
	}
	close(ready)
	if code, body := get(t, s, "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("readyz once ready: %d %q, want 200 ok", code, body)
	}

	// NATS goes away: not ready, and the reason names the connection.
	port := ns.Options().Port
	ns.Stop()
	stopped = true
	waitReadyz(t, s, http.StatusServiceUnavailable, "nats: not connected (")
	healthy()
	// NATS comes back on the same port: ready again.
	ns2, err := embednats.Start(embednats.Options{Port: port, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns2.Stop)
	waitReadyz(t, s, http.StatusOK, "ok")

	cancel()
	if code, body := get(t, s, "/readyz"); code != http.StatusServiceUnavailable || body != "not ready: process: stopping\n" {
		t.Errorf("readyz while stopping: %d %q", code, body)
	}
	healthy()
}

// TestMetricsAndRoutes: /metrics is the given handler (404 without one), only
// GET and HEAD are answered, and a closed endpoint refuses connections.
func TestMetricsAndRoutes(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "up 1\n") })
	s := start(t, metrics)
	if code, body := get(t, s, "/metrics"); code != http.StatusOK || body != "up 1\n" {
		t.Errorf("metrics: %d %q", code, body)
	}
	resp, err := http.Post("http://"+s.Addr()+"/healthz", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz: %d, want 405", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodHead, "http://"+s.Addr()+"/healthz", nil)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD /healthz: %d, want 200", resp.StatusCode)
	}

	bare := start(t, nil)
	if code, _ := get(t, bare, "/metrics"); code != http.StatusNotFound {
		t.Errorf("metrics without a handler: %d, want 404", code)
	}
	addr := bare.Addr()
	bare.Close()
	if _, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/healthz"); err == nil {
		t.Error("the endpoint still answers after Close")
	}
}

// TestStartErrors: an address that cannot be bound is an error naming the
// setting; a nil Server (no endpoint configured) ignores its calls.
func TestStartErrors(t *testing.T) {
	s := start(t, nil)
	if _, err := ops.Start(ops.Options{Addr: s.Addr()}); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Errorf("binding a taken address: %v", err)
	}
	var none *ops.Server
	none.SetChecks(ops.Running(context.Background()))
	none.Close()
}
