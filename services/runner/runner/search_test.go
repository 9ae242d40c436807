package runner_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// tools.search ranks the catalog of every running server, follows it as
// servers come and go, and refuses a request without a query.
func TestToolsSearch(t *testing.T) {
	e := runnertest.Start(t, quickOpts())
	alpha := e.Put(t, runnertest.Binary("alpha", testServer))
	e.Put(t, runnertest.Binary("beta", testServer))
	e.WaitState(t, "alpha", model.StateRunning, 10*time.Second)
	e.WaitState(t, "beta", model.StateRunning, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	found, err := e.Client.SearchTools(ctx, "environment variable", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(found.Tools) != 2 || len(found.Scores) != 2 || found.Tools[0].Tool != "env" || found.Tools[1].Tool != "env" {
		t.Fatalf("search for an environment variable: %+v", found)
	}
	if found.Tools[0].Subject != "mcp.v1.call."+found.Tools[0].Server+".env" || len(found.Tools[0].InputSchema) == 0 || found.Scores[0] <= 0 {
		t.Fatalf("a hit is not the full catalog entry: %+v", found.Tools[0])
	}

	e.Delete(t, alpha.ID)
	deadline := time.Now().Add(10 * time.Second)
	for {
		found, err = e.Client.SearchTools(ctx, "environment variable", 10)
		if err == nil && len(found.Tools) > 0 && found.Tools[0].Name == "beta__env" && !slices.ContainsFunc(found.Tools, func(t model.Tool) bool { return t.Server == "alpha" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alpha's tools still found after its removal: %+v %v", found, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, bad := range []struct {
		query string
		limit int
		field string
	}{{"  ", 0, "query"}, {"env", 101, "limit"}, {"env", -1, "limit"}} {
		_, err := e.Client.SearchTools(ctx, bad.query, bad.limit)
		var ae *apierr.Error
		if !errors.As(err, &ae) || ae.Code != apierr.Validation || ae.Field != bad.field {
			t.Errorf("search %q limit %d: %v, want an invalid %s", bad.query, bad.limit, err, bad.field)
		}
	}
}
