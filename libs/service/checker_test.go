package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/natsconn"
	"github.com/mcpbus/mcpbus/libs/ops"
	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/libs/settings"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// checking is a ready service with a readiness condition of its own.
type checking struct {
	fake
	down atomic.Bool
}

func (c *checking) Checks() []ops.Check {
	return []ops.Check{{Name: "backend", Err: func() error {
		if c.down.Load() {
			return errors.New("unreachable")
		}
		return nil
	}}}
}

// TestRunAloneServiceChecks: a service's own checks (service.Checker) are
// part of /readyz: it turns 503 naming the check while one fails, 200 after.
func TestRunAloneServiceChecks(t *testing.T) {
	ns := testkit.NATS(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	svc := &checking{fake: fake{ready: make(chan struct{})}}
	close(svc.ready)
	svc.down.Store(true)
	def := service.Definition{Name: "checking", Version: "0.0.1", Options: func() service.Options { return &checkingOptions{svc} }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- service.RunAlone(ctx, def, service.Bus{NATS: natsconn.Options{URLs: ns.ClientURL()}},
			service.Host{LogLevel: "info", DataDir: t.TempDir(), Replicas: 1, MetricsAddr: addr, InsecureBus: true}, def.Options(), io.Discard)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("RunAlone did not return")
		}
	}()
	testkit.WaitFor(t, 10*time.Second, func() (bool, string) {
		code, body, err := httpGet("http://" + addr + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "backend: unreachable"), fmt.Sprintf("readyz: %d %q %v", code, body, err)
	})
	svc.down.Store(false)
	if code, body, err := httpGet("http://" + addr + "/readyz"); code != http.StatusOK {
		t.Errorf("readyz with the backend back: %d %q %v", code, body, err)
	}
}

type checkingOptions struct{ svc *checking }

func (o *checkingOptions) Register(*settings.Set) {}
func (o *checkingOptions) Validate() error        { return nil }
func (o *checkingOptions) Build(context.Context, service.Env) (service.Service, error) {
	return o.svc, nil
}
