package credential

import (
	"context"
	"errors"
	"fmt"
	"github.com/mcpbus/mcpbus/libs/access"
	"io"
	"path/filepath"

	"github.com/mcpbus/mcpbus/libs/service"
	"github.com/mcpbus/mcpbus/libs/settings"
	"github.com/mcpbus/mcpbus/services/credential/store"
	"github.com/mcpbus/mcpbus/services/credential/store/filestore"
	"github.com/mcpbus/mcpbus/services/credential/store/vaultstore"
)

// Credential backends.
const (
	BackendFile  = "file"
	BackendVault = "vault"
)

// Definition is the credential service's row of the service table.
func Definition() service.Definition {
	return service.Definition{Name: "credential", Version: Version,
		Summary: "secrets of MCP servers, in an encrypted file store or Vault",
		Options: func() service.Options { return &Options{} }}
}

// Register adds the service's settings. Vault's own settings come from the
// environment like the vault CLI's (a token on a command line shows in ps).
func (o *Options) Register(s *settings.Set) {
	s.String(&o.Backend, "cred-backend", "", BackendFile,
		"where secrets live: file (encrypted under <data-dir>/secrets) or vault (VAULT_ADDR, VAULT_TOKEN or MCPBUS_VAULT_ROLE_ID/MCPBUS_VAULT_SECRET_ID, MCPBUS_VAULT_MOUNT)")
}

// Validate checks the backend and what it needs.
func (o *Options) Validate() error {
	switch o.Backend {
	case "", BackendFile:
		return nil
	case BackendVault:
		if o.Vault.Address == "" && vaultstore.ConfigFromEnv().Address == "" {
			return errors.New("--cred-backend vault needs VAULT_ADDR")
		}
		return nil
	}
	return fmt.Errorf("--cred-backend %q: use file or vault", o.Backend)
}

// Build opens the secret store and makes the service.
func (o *Options) Build(ctx context.Context, env service.Env) (service.Service, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	opts := *o
	opts.Prefix, opts.Logger = env.Prefix, env.Logger
	var closer io.Closer
	if opts.Store == nil {
		st, c, err := openStore(ctx, opts, env)
		if err != nil {
			return nil, err
		}
		opts.Store, closer = st, c
	}
	w, err := env.AuditWriter(string(access.Credential))
	if err != nil {
		return nil, fmt.Errorf("credential: %w", err)
	}
	opts.Audit = w
	svc, err := New(env.Conn, opts)
	if err != nil {
		if closer != nil {
			_ = closer.Close()
		}
		return nil, err
	}
	svc.closer = closer
	return svc, nil
}

// openStore opens the chosen backend; the closer (may be nil) releases it.
func openStore(ctx context.Context, opts Options, env service.Env) (store.Store, io.Closer, error) {
	switch opts.Backend {
	case "", BackendFile:
		st, err := filestore.New(filepath.Join(env.DataDir, filestore.SubDir))
		if err != nil {
			return nil, nil, err
		}
		env.Logger.Info("file credential store", "dir", st.Dir())
		return st, nil, nil
	case BackendVault:
		cfg := opts.Vault
		if cfg.Address == "" {
			cfg = vaultstore.ConfigFromEnv()
		}
		if cfg.Address == "" {
			return nil, nil, errors.New("--cred-backend vault needs VAULT_ADDR")
		}
		st, err := vaultstore.New(ctx, cfg, env.Logger)
		if err != nil {
			return nil, nil, err
		}
		return st, closeFunc(st.Close), nil
	}
	return nil, nil, fmt.Errorf("--cred-backend %q: use file or vault", opts.Backend)
}

type closeFunc func()

func (f closeFunc) Close() error { f(); return nil }
