package config_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/embednats"
	"github.com/mcpbus/mcpbus/libs/model"
)

// On a NATS server whose storage is used up, a config create is refused in
// the error contract within the request's time, saying why, and leaves
// nothing behind (no config, no slug reservation, no secret); once room is
// back the same config is created, without a restart.
func TestCreateOnAFullServer(t *testing.T) {
	e := newEnvNATS(t, embednats.Options{MaxStore: 256 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fill, err := e.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "fill"})
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 1<<20)
	for i := 0; ; i++ {
		if _, err := fill.Put(ctx, fmt.Sprint("k", i), val); err != nil {
			if !bus.StoreFull(err) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	began := time.Now()
	err = e.call("create", model.ConfigCreateRequest{Config: stdio("GitHub")}, nil)
	if apierr.Of(err) != apierr.ServiceUnavailable || !strings.Contains(err.Error(), "insufficient resources") {
		t.Fatalf("create on a full server: %v; want SERVICE_UNAVAILABLE saying why", err)
	}
	if took := time.Since(began); took > 15*time.Second {
		t.Errorf("the refusal took %s", took)
	}
	if err := e.js.DeleteKeyValue(ctx, "fill"); err != nil {
		t.Fatal(err)
	}
	nothingSaved(t, e)
	e.mustCreate(stdio("GitHub"), nil)
}
