package testkit

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/service"
)

// RunService runs svc until the test ends (or stop is called) and returns
// once it is ready; it fails the test if it is not ready within 30 s or if
// Run fails. stop ends it and waits for Run to return.
func RunService(tb testing.TB, svc service.Service) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("service Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			tb.Errorf("service did not stop within 30s")
		}
	}
	tb.Cleanup(stop)
	select {
	case <-svc.Ready():
	case err := <-done:
		stopped = true
		tb.Fatalf("service stopped before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		tb.Fatal("service not ready within 30s")
	}
	return stop
}

// Superuser is a bus user allowed every subject, for tests that watch all
// the traffic of an authenticated bus: add the user to the server's users
// and connect with the option. It exists only in the test that makes it.
func Superuser(tb testing.TB) (*server.NkeyUser, nats.Option) {
	tb.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		tb.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		tb.Fatal(err)
	}
	all := &server.SubjectPermission{Allow: []string{">"}}
	return &server.NkeyUser{Nkey: pub, Permissions: &server.Permissions{Publish: all, Subscribe: all}}, nats.Nkey(pub, kp.Sign)
}

// WaitFor polls cond every 20 ms until it holds, failing the test with
// cond's last message after within.
func WaitFor(tb testing.TB, within time.Duration, cond func() (ok bool, msg string)) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %s: %s", within, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreePort is a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
