package gateway_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/mcpbus/mcpbus/services/gateway/auth"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
	"github.com/mcpbus/mcpbus/services/runner/runnertest"
)

// TestEveryEndpointRefusesNonInboxReplies: no endpoint of the gateway's bus
// service (keys.*, tokens.revoke, oauth.start, approvals.*) answers a request
// whose reply subject is not an inbox. Were one to, a caller could aim the
// gateway's answer at a KV key or a stream's API the gateway may write
// (mcp_apikeys, mcp_approvals) and it would publish there with the
// gateway's rights (docs/security.md, "No one acts through a service").
// Each endpoint answers the same request with an inbox reply, so its
// silence is the refusal.
func TestEveryEndpointRefusesNonInboxReplies(t *testing.T) {
	e := runnertest.Start(t, quietRunner())
	startGateway(t, e, gateway.Options{})
	nc := e.NC

	m, err := nc.Request("$SRV.INFO."+auth.ServiceName, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatal(err)
	}
	if len(info.Endpoints) < 8 {
		t.Fatalf("the gateway's service lists %d endpoints: %+v", len(info.Endpoints), info.Endpoints)
	}
	stolen, err := nc.SubscribeSync("evil.>")
	if err != nil {
		t.Fatal(err)
	}
	for i, ep := range info.Endpoints {
		if err := nc.PublishRequest(ep.Subject, fmt.Sprintf("evil.%d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, ep := range info.Endpoints {
		if _, err := nc.Request(ep.Subject, []byte(`{}`), 10*time.Second); err != nil {
			t.Errorf("%s does not answer an inbox reply: %v", ep.Subject, err)
		}
	}
	for {
		m, err := stolen.NextMsg(500 * time.Millisecond)
		if err != nil {
			break
		}
		var i int
		_, _ = fmt.Sscanf(m.Subject, "evil.%d", &i)
		t.Errorf("%s answered into %s: %s", info.Endpoints[i].Subject, m.Subject, m.Data)
	}
}
