package config_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// On a NATS server whose storage is used up, a config create is refused in
// the error contract within the request's time, saying why, and leaves
// nothing behind (no config, no slug reservation, no secret); once room is
// back the same config is created, without a restart.
func TestCreateOnAFullServer(t *testing.T) {
	e := newEnvNATS(t, embednats.Options{MaxStore: 256 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	free := testkit.FillStore(ctx, t, e.js)
	began := time.Now()
	err := e.call("create", model.ConfigCreateRequest{Config: stdio("GitHub")}, nil)
	if apierr.Of(err) != apierr.ServiceUnavailable || !strings.Contains(err.Error(), "insufficient resources") {
		t.Fatalf("create on a full server: %v; want SERVICE_UNAVAILABLE saying why", err)
	}
	if took := time.Since(began); took > 15*time.Second {
		t.Errorf("the refusal took %s", took)
	}
	free()
	nothingSaved(t, e)
	e.mustCreate(stdio("GitHub"), nil)
}
