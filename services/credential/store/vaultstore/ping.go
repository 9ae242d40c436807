package vaultstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcpbus/mcpbus/services/credential/store"
)

var _ store.Pinger = (*Store)(nil)

// Ping asks Vault's health endpoint (no token needed): nil when Vault answers,
// is initialised and unsealed; an error naming which of these fails.
func (s *Store) Ping(ctx context.Context) error {
	h, err := s.client.Sys().HealthWithContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("vault unreachable: %w", err)
	case !h.Initialized:
		return errors.New("vault not initialised")
	case h.Sealed:
		return errors.New("vault sealed")
	}
	return nil
}
