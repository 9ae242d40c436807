package service_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/natsconn"
	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/libs/settings"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// fake is a service that is ready when the test says so.
type fake struct{ ready chan struct{} }

func (f *fake) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (f *fake) Ready() <-chan struct{}        { return f.ready }

type fakeOptions struct{ svc *fake }

func (o *fakeOptions) Register(*settings.Set) {}
func (o *fakeOptions) Validate() error        { return nil }
func (o *fakeOptions) Build(context.Context, service.Env) (service.Service, error) {
	return o.svc, nil
}

func httpGet(url string) (int, string, error) {
	resp, err := (&http.Client{Timeout: 3 * time.Second}).Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestRunAloneMetricsAddr: a service run alone with --metrics-addr serves
// /healthz at once, /readyz 200 only once the service is ready, /metrics,
// and stops serving when it stops.
func TestRunAloneMetricsAddr(t *testing.T) {
	ns := testkit.NATS(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	base := "http://" + addr
	svc := &fake{ready: make(chan struct{})}
	def := service.Definition{Name: "fake", Version: "0.0.1", Options: func() service.Options { return &fakeOptions{svc} }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- service.RunAlone(ctx, def, service.Bus{NATS: natsconn.Options{URLs: ns.ClientURL()}},
			service.Host{LogLevel: "info", DataDir: t.TempDir(), Replicas: 1, MetricsAddr: addr, InsecureBus: true}, def.Options(), io.Discard)
	}()

	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		code, body, err := httpGet(base + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "fake: not ready yet"), fmt.Sprintf("readyz: %d %q %v", code, body, err)
	})
	if code, body, err := httpGet(base + "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("healthz: %d %q %v", code, body, err)
	}
	close(svc.ready)
	if code, body, err := httpGet(base + "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("readyz once ready: %d %q %v", code, body, err)
	}
	code, body, err := httpGet(base + "/metrics")
	if code != http.StatusOK || !strings.Contains(body, `service_name="mcpbus-fake"`) || !strings.Contains(body, "go_goroutines") {
		t.Errorf("metrics: %d %v\n%s", code, err, body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunAlone: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunAlone did not return")
	}
	if _, _, err := httpGet(base + "/healthz"); err == nil {
		t.Error("the operations endpoint still answers after RunAlone returned")
	}
}

// TestMetricsAddrValidated: a malformed --metrics-addr stops the host at once.
func TestMetricsAddrValidated(t *testing.T) {
	h := service.Host{LogLevel: "info", DataDir: t.TempDir(), Replicas: 1, MetricsAddr: "9464"}
	if err := h.Validate(); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Errorf("Validate: %v, want an error naming --metrics-addr", err)
	}
}

// TestRunAloneRefusesAnOpenBus: a service run alone refuses a NATS server
// that asks no identity (anyone reaching it could act as the service),
// unless --insecure-bus says to run on it anyway.
func TestRunAloneRefusesAnOpenBus(t *testing.T) {
	ns := testkit.NATS(t)
	def := service.Definition{Name: "fake", Version: "0.0.1", Options: func() service.Options { return &fakeOptions{&fake{ready: make(chan struct{})}} }}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := service.RunAlone(ctx, def, service.Bus{NATS: natsconn.Options{URLs: ns.ClientURL()}},
		service.Host{LogLevel: "info", DataDir: t.TempDir(), Replicas: 1}, def.Options(), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "requires no authentication") || !strings.Contains(err.Error(), "--insecure-bus") {
		t.Fatalf("RunAlone on an open bus: %v", err)
	}
}
