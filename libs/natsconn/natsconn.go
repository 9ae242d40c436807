// Package natsconn is the one way an mcpbus process connects to NATS: server
// URLs, credentials (a creds file or an nkey seed), TLS, a private inbox
// prefix and the connection name, reconnecting forever. Services, the CLI
// and `mcpbus up`'s in-process connections all go through Dial.
package natsconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/access"
	"github.com/mcpbus/mcpbus/libs/settings"
)

// Options say where NATS is and who this process is there.
type Options struct {
	// URLs is one server URL or a comma-separated list. They are tried in
	// a random order, so the replicas of a service given one list spread
	// over the nodes (nats.go's default); see KeepOrder.
	URLs string
	// KeepOrder tries URLs in the order given instead (a process pinned to
	// its own node, listed first).
	KeepOrder bool
	// CredsFile is a NATS credentials file (user JWT and nkey seed).
	CredsFile string
	// NKeyFile is a file holding an nkey seed (user nkey authentication).
	NKeyFile string
	// CAFile, CertFile and KeyFile configure TLS: the CA to trust and this
	// client's certificate (both or neither of the last two).
	CAFile   string
	CertFile string
	KeyFile  string
	// InboxPrefix replaces _INBOX for this connection's replies, so
	// permissions can keep other identities from reading them. With an
	// nkey file and no prefix, it is access.Inbox(<file name less .nk>),
	// the prefix the identities of `mcpbus up` are given.
	InboxPrefix string
	// Seed is an nkey seed held in memory (the in-process connections of
	// mcpbus up); not a setting.
	Seed []byte
}

// Register adds the connection settings.
func (o *Options) Register(s *settings.Set) {
	s.String(&o.URLs, "nats", "MCPBUS_NATS_URL", nats.DefaultURL, "NATS server URL, or a comma-separated list (tried in a random order)")
	s.Bool(&o.KeepOrder, "nats-keep-order", "MCPBUS_NATS_KEEP_ORDER", false, "try the --nats URLs in the order given (a process pinned to the node listed first)")
	s.String(&o.CredsFile, "nats-creds", "", "", "NATS credentials file (JWT + nkey seed)")
	s.String(&o.NKeyFile, "nats-nkey", "", "", "file with an nkey seed to authenticate with")
	s.String(&o.CAFile, "nats-ca", "", "", "CA certificate (PEM) to verify the NATS server with")
	s.String(&o.CertFile, "nats-cert", "", "", "client certificate (PEM) for NATS TLS")
	s.String(&o.KeyFile, "nats-key", "", "", "client key (PEM) for NATS TLS")
	s.String(&o.InboxPrefix, "nats-inbox-prefix", "", "", "prefix of this connection's reply subjects (default _INBOX)")
}

// Validate checks the options that can be checked before connecting.
func (o Options) Validate() error {
	if o.CredsFile != "" && o.NKeyFile != "" {
		return errors.New("--nats-creds and --nats-nkey are exclusive: give one identity")
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return errors.New("--nats-cert and --nats-key go together")
	}
	return nil
}

// Mode is how Dial treats a server that is not there.
type Mode int

const (
	// Wait keeps trying in the background until a server answers: services
	// start before NATS in a deployment and must not give up.
	Wait Mode = iota
	// FailFast returns an error at once: a CLI command should say NATS is
	// not running rather than hang.
	FailFast
)

// Dial connects as name. extra options come last (an in-process server
// for `mcpbus up`, test tweaks). log, when set, hears disconnections and
// reconnections.
func (o Options) Dial(name string, mode Mode, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.Timeout(5 * time.Second),
	}
	if o.KeepOrder {
		opts = append(opts, nats.DontRandomize())
	}
	if mode == Wait {
		opts = append(opts, nats.RetryOnFailedConnect(true))
	}
	// The identity files are read once, here: nats.go's own options re-read
	// them at every (re)connect, and a deployment may make them unreadable
	// once the process runs (the runner's children must not read its seed).
	if o.CredsFile != "" {
		opt, err := credsOption(o.CredsFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-creds: %w", err)
		}
		opts = append(opts, opt)
	}
	if o.NKeyFile != "" {
		seed, err := readSeed(o.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey: %w", err)
		}
		o.Seed = seed
		if o.InboxPrefix == "" {
			o.InboxPrefix = access.Inbox(strings.TrimSuffix(filepath.Base(o.NKeyFile), access.SeedExt))
		}
	}
	if len(o.Seed) > 0 {
		kp, err := nkeys.FromSeed(o.Seed)
		if err != nil {
			return nil, fmt.Errorf("nkey seed: %w", err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("nkey seed: %w", err)
		}
		opts = append(opts, nats.Nkey(pub, kp.Sign))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if o.CertFile != "" {
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	if log != nil {
		opts = append(opts,
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil {
					log.Warn("NATS connection lost; reconnecting", "conn", name, "error", err)
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) {
				log.Info("NATS connection back", "conn", name, "server", nc.ConnectedUrlRedacted())
			}),
			nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
				subject := ""
				if sub != nil {
					subject = sub.Subject
				}
				log.Warn("NATS error", "conn", name, "subject", subject, "error", err)
			}))
	}
	opts = append(opts, extra...)
	url := o.URLs
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s as %s: %w", url, name, err)
	}
	return nc, nil
}

// IdentityPaths are the identity files of o and the directories holding
// them (the identities directory; not when that is the home directory or
// the root): what the runner keeps its children from reading.
func (o Options) IdentityPaths() []string {
	home, _ := os.UserHomeDir()
	var out []string
	for _, f := range []string{o.NKeyFile, o.CredsFile} {
		if f == "" {
			continue
		}
		abs, err := filepath.Abs(f)
		if err != nil {
			abs = filepath.Clean(f)
		}
		out = append(out, abs)
		if dir := filepath.Dir(abs); dir != "/" && (home == "" || dir != filepath.Clean(home)) {
			out = append(out, dir)
		}
	}
	return out
}

// readSeed reads an nkey seed file (the seed alone, or decorated).
func readSeed(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return seed, nil
}

// credsOption reads a credentials file (user JWT and seed) into memory.
func credsOption(path string) (nats.Option, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	jwt, err := nkeys.ParseDecoratedJWT(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return nats.UserJWTAndSeed(jwt, string(seed)), nil
}

// WaitConnected waits until nc is connected (a Wait-mode dial returns before
// it is), or ctx ends.
func WaitConnected(ctx context.Context, nc *nats.Conn) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for NATS: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
