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
