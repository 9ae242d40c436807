package runner_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// A hostile (or careless) server's result larger than the bus carries is
// answered at once with VALIDATION_ERROR naming its size: it used to be
// dropped, and its caller waited out the whole deadline. The server keeps
// serving.
func TestResultOverBusLimit(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	e.Put(t, runnertest.Binary("big", testServer))
	e.WaitState(t, "big", model.StateRunning, 15*time.Second)
	size := int(e.NC.MaxPayload()) + 64<<10
	start := time.Now()
	_, err := call(t, e, "big", "large", fmt.Sprintf(`{"bytes":%d}`, size))
	took := time.Since(start)
	if ae := wantCode(t, err, apierr.Validation); !strings.Contains(ae.Message, "more than the bus carries") {
		t.Fatalf("the refusal: %s", ae.Message)
	}
	if took > 10*time.Second {
		t.Errorf("the refusal took %s: the caller waited for a reply that was never sent", took)
	}
	res, err := call(t, e, "big", "echo", `{"message":"after"}`)
	if err != nil || text(t, res) != "after" {
		t.Fatalf("the server after the refused result: %s %v", res, err)
	}
}
