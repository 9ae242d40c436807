package vaultstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcpbus/mcpbus/services/credential/store"
)

var _ store.Pinger = (*Store)(nil)

// Ping asks Vault's health endpoint (no token needed): nil when Vault answers,
// is initialised and unsealed, and has not called the static token invalid
// (expired or revoked) on the last request; an error naming which fails.
func (s *Store) Ping(ctx context.Context) error {
	h, err := s.client.Sys().HealthWithContext(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("vault unreachable: %w", err)
	case !h.Initialized:
		return errors.New("vault not initialised")
	case h.Sealed:
		return errors.New("vault sealed")
	case s.tokenInvalid.Load():
		return errors.New("vault refuses the token (VAULT_TOKEN) as invalid: expired or revoked")
	}
	return nil
}
