package testkit

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/embednats"
)

// Cluster starts an embedded NATS cluster of n nodes for t (JetStream in
// temporary directories), stopped when t ends; a short run (-short) skips
// the test.
func Cluster(t testing.TB, n int) *embednats.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skipf("starts a %d-node cluster", n)
	}
	c, err := embednats.StartCluster(n, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// LeadOn moves the leadership of stream to c's node name (a stepdown asking
// for it, over nc, until it holds), so a test can stop the leader knowing
// which node it is.
func LeadOn(t testing.TB, nc *nats.Conn, c *embednats.Cluster, stream, name string) {
	t.Helper()
	WaitFor(t, 20*time.Second, func() (bool, string) {
		if i := c.StreamLeader(stream); i >= 0 && c.Nodes[i].Name() == name {
			return true, ""
		}
		body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": name}})
		_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, body, 2*time.Second)
		time.Sleep(200 * time.Millisecond)
		return false, stream + " is led elsewhere"
	})
}
