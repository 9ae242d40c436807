package embednats

import (
	"net"
	"testing"
)

// TestZeroPortIsFree: Options{} listens on a free port, never on NATS's
// default 4222, so tests pass while `make run` holds 4222.
func TestZeroPortIsFree(t *testing.T) {
	if l, err := net.Listen("tcp", "127.0.0.1:4222"); err == nil {
		defer l.Close() // held as mcpbus up would hold it
	}
	s, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if p := s.Options().Port; p == 4222 || p <= 0 {
		t.Fatalf("listening on %d", p)
	}
}

// Two servers started without a store dir never share JetStream files: a
// stream one makes is absent from the other.
func TestStoreDirIsPrivate(t *testing.T) {
	a, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	b, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if a.Options().StoreDir == "" || a.Options().StoreDir == b.Options().StoreDir {
		t.Fatalf("store dirs %q and %q", a.Options().StoreDir, b.Options().StoreDir)
	}
	if a.JetStreamConfig().StoreDir == b.JetStreamConfig().StoreDir {
		t.Fatalf("both servers keep JetStream in %s", a.JetStreamConfig().StoreDir)
	}
}
