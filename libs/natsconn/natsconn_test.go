package natsconn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

func TestValidate(t *testing.T) {
	for _, o := range []Options{{CredsFile: "a", NKeyFile: "b"}, {CertFile: "c"}, {KeyFile: "k"}} {
		if o.Validate() == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

func TestFailFastWithoutServer(t *testing.T) {
	start := time.Now()
	_, err := Options{URLs: "nats://127.0.0.1:1"}.Dial("test", FailFast, nil)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("error %v should name the URL", err)
	}
	if time.Since(start) > 6*time.Second {
		t.Fatalf("took %s", time.Since(start))
	}
}

// TestNKeyAndInbox: an nkey user connects with its seed file, its replies
// arrive under its own inbox prefix, and a wrong seed is refused.
func TestNKeyAndInbox(t *testing.T) {
	user, _ := nkeys.CreateUser()
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true,
		Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("server not ready")
	}

	o := Options{URLs: ns.ClientURL(), NKeyFile: seedFile, InboxPrefix: "_INBOX_test"}
	nc, err := o.Dial("test", FailFast, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond([]byte(m.Reply)) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	reply, err := nc.Request("echo", nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(reply.Data), "_INBOX_test.") {
		t.Fatalf("reply subject %q does not use the inbox prefix", reply.Data)
	}

	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	bad := filepath.Join(dir, "other.nk")
	if err := os.WriteFile(bad, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	if nc2, err := (Options{URLs: ns.ClientURL(), NKeyFile: bad}).Dial("test", FailFast, nil); err == nil {
		nc2.Close()
		t.Fatal("an unknown nkey connected")
	}
}

// The seed file is read once: a reconnect after it is gone still signs in
// (the runner's children must not read it, so a deployment may remove it).
func TestSeedReadOnce(t *testing.T) {
	user, _ := nkeys.CreateUser()
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	seedFile := filepath.Join(t.TempDir(), "runner.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true,
		Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("server not ready")
	}
	reconnected := make(chan struct{}, 1)
	nc, err := Options{URLs: ns.ClientURL(), NKeyFile: seedFile}.Dial("test", FailFast, nil,
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := os.Remove(seedFile); err != nil {
		t.Fatal(err)
	}
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reconnected:
	case <-time.After(5 * time.Second):
		t.Fatalf("no reconnect without the seed file: %v", nc.LastError())
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}
