package natsconn

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestURLOrder: connections given one list of three servers spread over
// them (the replicas of a service share one MCPBUS_NATS_URL); with
// KeepOrder every one connects to the first.
func TestURLOrder(t *testing.T) {
	var urls []string
	for range 3 {
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		t.Cleanup(ns.Shutdown)
		if !ns.ReadyForConnections(5 * time.Second) {
			t.Fatal("server not ready")
		}
		urls = append(urls, ns.ClientURL())
	}
	list := strings.Join(urls, ",")
	servers := func(keep bool) map[string]int {
		seen := map[string]int{}
		for range 24 {
			nc, err := Options{URLs: list, KeepOrder: keep}.Dial("test", FailFast, nil)
			if err != nil {
				t.Fatal(err)
			}
			seen[nc.ConnectedUrl()]++
			nc.Close()
		}
		return seen
	}
	// 24 connections all on one server by chance: 3 × (1/3)^24.
	if seen := servers(false); len(seen) < 2 {
		t.Fatalf("24 connections went to %v; want them spread over the 3 servers", seen)
	}
	if seen := servers(true); len(seen) != 1 || seen[urls[0]] != 24 {
		t.Fatalf("with KeepOrder the connections went to %v; want all on %s", seen, urls[0])
	}
}
