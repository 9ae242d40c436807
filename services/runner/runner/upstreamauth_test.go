package runner_test

import (
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/oauthtest"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// An HTTP upstream that answers 401 puts the server in error with
// UNAUTHORIZED "Authentication failed. Check your API key." (not
// NETWORK_ERROR "could not connect: … Unauthorized"), and the runner does
// not retry it on its own: new credentials are needed first.
func TestUpstreamUnauthorized(t *testing.T) {
	as := oauthtest.Start(t, oauthtest.Options{})
	url := testmcp.ServeProtected(t, "remote", as)
	e := runnertest.Start(t, lifecycleOpts())
	cfg := model.McpConfig{Name: "remote", Enabled: true,
		Package:   model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url},
		Runtime:   model.Runtime{Eager: true}}
	e.Put(t, cfg)
	st := e.WaitState(t, "remote", model.StateError, 10*time.Second)
	if st.Code != string(apierr.Unauthorized) || st.Message != model.MsgAuthFailed || !st.RetryAt.IsZero() {
		t.Fatalf("status %+v", st)
	}
	time.Sleep(time.Second) // past the first backoff (200 ms): still no restart
	if st := e.Status("remote"); st.State != model.StateError || st.Restarts != 0 {
		t.Fatalf("status after a while %+v", st)
	}
}
