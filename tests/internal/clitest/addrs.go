package clitest

import (
	"regexp"
	"testing"
	"time"
)

// AddrWait bounds how long StartUp waits for an up on free ports to say
// where it listens: it says so once every service started and a --config
// file was imported, which a loaded CI machine can take a minute or more for.
const AddrWait = 3 * time.Minute

// What up prints once it runs (tools/mcpbus/internal/cli/up.go and the
// gateway's Announce): the bound NATS URL and the gateway's address.
var (
	natsLine    = regexp.MustCompile(`(?m)^mcpbus is up: NATS at (nats://[^,\s]+),`)
	gatewayLine = regexp.MustCompile(`(?m)^gateway: MCP endpoint (http://[^/\s]+)/mcp[ ,]`)
)

// upAddrs reads the NATS URL and the gateway's base URL from up's log, ""
// for what it has not printed yet.
func upAddrs(log string) (natsURL, httpURL string) {
	if m := natsLine.FindStringSubmatch(log); m != nil {
		natsURL = m[1]
	}
	if m := gatewayLine.FindStringSubmatch(log); m != nil {
		httpURL = m[1]
	}
	return natsURL, httpURL
}

// waitAddrs waits until up's log names both addresses and records them.
func (u *Up) waitAddrs(t testing.TB, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		natsURL, httpURL := upAddrs(u.logs.String())
		if natsURL != "" && httpURL != "" {
			u.natsURL, u.httpURL = natsURL, httpURL
			return
		}
		select {
		case <-u.done:
			t.Fatalf("mcpbus up exited (%v) before it said where it listens:\n%s", u.err, u.Tail(12000))
		case <-tick.C:
			if time.Now().After(deadline) {
				t.Fatalf("mcpbus up did not say where it listens within %s:\n%s", within, u.Tail(12000))
			}
		}
	}
}
