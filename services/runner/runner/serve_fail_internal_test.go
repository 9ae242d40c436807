package runner

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestServeFailureStatusHasACode: a server whose micro service cannot
// start (here its subjects are not ones the bus takes) is let go with an
// error status that carries the error contract's code and message, as
// every other error status does; it had neither.
func TestServeFailureStatusHasACode(t *testing.T) {
	nc := testkit.Connect(t, testkit.NATS(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := newSecretGuard()
	if err != nil {
		t.Fatal(err)
	}
	always := func(string) bool { return true }
	status := &flakyKV{stored: map[string]string{}}
	r := &Runner{opts: Options{ID: "me", LeaseTTL: 3e9}, log: quiet, telemetry: newCallTelemetry(), nc: nc, js: js, subj: bus.NewSubjects(""),
		servers: map[string]*server{}, leases: map[string]*lease{}, status: map[string]model.Status{}, agentStatus: map[string][]byte{},
		catalog: map[string]model.Catalog{}, secrets: secrets,
		statusW: newLatestWriter(status, always, quiet), toolsW: newLatestWriter(&flakyKV{stored: map[string]string{}}, always, quiet)}
	cfg := &model.McpConfig{Slug: "bad slug", Enabled: true, // no subject holds a space
		Package: model.Package{Type: model.PackageBinary, Identifier: "/bin/true"}, Transport: model.Transport{Type: model.TransportStdio}}
	r.takeServer(cfg)

	data, ok := status.value(cfg.Slug)
	if !ok {
		t.Fatal("no status written for the server that could not be served")
	}
	var st model.Status
	if err := json.Unmarshal([]byte(data), &st); err != nil {
		t.Fatal(err)
	}
	if st.State != model.StateError || st.Code != string(apierr.ServiceUnavailable) || st.Message == "" {
		t.Fatalf("status %s, want state error with code %s and a message", data, apierr.ServiceUnavailable)
	}
	if _, held := r.servers[cfg.Slug]; held {
		t.Fatal("the server is still held")
	}
}
