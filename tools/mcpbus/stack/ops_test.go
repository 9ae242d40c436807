package stack

import (
	"context"
	"errors"
	"testing"

	"github.com/mcpbus/mcpbus/libs/ops"
	"github.com/mcpbus/mcpbus/libs/service"
)

type readySvc struct{ ready chan struct{} }

func (s *readySvc) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (s *readySvc) Ready() <-chan struct{}        { return s.ready }

type checkedSvc struct {
	readySvc
	err error
}

func (s *checkedSvc) Checks() []ops.Check {
	return []ops.Check{{Name: "backend", Err: func() error { return s.err }}}
}

// TestReadyChecksIncludeServiceChecks: `mcpbus up`'s /readyz carries a
// service's own checks (the credential service's backend), named after it.
func TestReadyChecksIncludeServiceChecks(t *testing.T) {
	ready := make(chan struct{})
	close(ready)
	cred := &checkedSvc{readySvc: readySvc{ready: ready}, err: errors.New("vault sealed")}
	st := &Stack{Services: map[string]service.Service{"config": &readySvc{ready: ready}, "credential": cred}}
	var found bool
	for _, c := range st.ReadyChecks(t.Context()) {
		if c.Name == "credential backend" {
			found = true
			if err := c.Err(); err == nil || err.Error() != "vault sealed" {
				t.Errorf("credential backend check: %v", err)
			}
		}
	}
	if !found {
		t.Fatal("no credential backend check among the stack's")
	}
}
