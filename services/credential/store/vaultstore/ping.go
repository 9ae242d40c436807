package vaultstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

var _ store.Pinger = (*Store)(nil)

// Ping asks Vault's health endpoint (no token needed): nil when Vault answers,
// is initialised and unsealed, has not called the static token invalid
// (expired or revoked) on the last request, and takes the AppRole login
// when the last one was refused (tried again here); an error naming which
// fails.
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
	case s.loginRefused.Load():
		// Try again: a new secret id in its file is taken without a
		// request having to come first.
		if err := s.ensureAuth(ctx, s.client.Token()); err != nil {
			return fmt.Errorf("vault refuses the AppRole login (give a new secret id): %s", apierr.From(err).Message)
		}
	}
	return nil
}
