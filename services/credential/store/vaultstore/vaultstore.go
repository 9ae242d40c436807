// Package vaultstore keeps credential records in HashiCorp Vault's KV v2
// engine, one secret per server at <mount>/mcpbus/<key>.
package vaultstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vault "github.com/hashicorp/vault/api"
	"github.com/hashicorp/vault/api/auth/approle"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

// Environment variables read by ConfigFromEnv (VAULT_ADDR and VAULT_TOKEN as
// the vault CLI reads them; the TLS variables VAULT_CACERT etc. are read by
// the Vault client itself).
const (
	EnvAddr         = "VAULT_ADDR"
	EnvToken        = "VAULT_TOKEN"
	EnvMount        = "MCPBUS_VAULT_MOUNT"
	EnvRoleID       = "MCPBUS_VAULT_ROLE_ID"
	EnvSecretID     = "MCPBUS_VAULT_SECRET_ID"
	EnvAppRoleMount = "MCPBUS_VAULT_APPROLE_MOUNT"
	// The AppRole pair may come from files instead (a volume only the
	// credential service mounts); they are read at each login, so a new
	// secret id written there is used from the next login on.
	EnvRoleIDFile   = "MCPBUS_VAULT_ROLE_ID_FILE"
	EnvSecretIDFile = "MCPBUS_VAULT_SECRET_ID_FILE"
	// EnvInsecureSkipVerify must be "true" as well for VAULT_SKIP_VERIFY to
	// be taken: without verifying Vault's certificate, whoever sits between
	// gets the token and every secret.
	EnvInsecureSkipVerify = "MCPBUS_VAULT_INSECURE_SKIP_VERIFY"
)

// DefaultMount is the KV v2 mount used when none is configured.
const DefaultMount = "secret"

// pathPrefix is where mcpbus keeps its records inside the mount; policies grant
// <mount>/data/mcpbus/* and <mount>/metadata/mcpbus/*.
const pathPrefix = "mcpbus/"

// Config says where Vault is and how to log in: a token, or AppRole (RoleID +
// SecretID). Token wins when both are set.
type Config struct {
	Address  string
	Token    string
	Mount    string // KV v2 mount (default "secret")
	RoleID   string
	SecretID string
	// RoleIDFile and SecretIDFile hold the AppRole pair instead of RoleID
	// and SecretID (one or the other for each): read at each login, and
	// refused when others than the owner may read them.
	RoleIDFile   string
	SecretIDFile string
	// AppRoleMount is where the AppRole auth method is mounted (default "approle").
	AppRoleMount string
	// InsecureSkipVerify accepts VAULT_SKIP_VERIFY (which the Vault client
	// reads from the environment); without it, that setting is refused.
	InsecureSkipVerify bool
	// Timeout bounds one HTTP request to Vault (default 10s).
	Timeout time.Duration
	// MaxRetries of a failed request (connection error, 5xx); 0 keeps the
	// client's default (2), negative disables retries.
	MaxRetries int
}

// ConfigFromEnv reads the configuration from the environment.
func ConfigFromEnv() Config {
	return Config{
		Address:      os.Getenv(EnvAddr),
		Token:        os.Getenv(EnvToken),
		Mount:        os.Getenv(EnvMount),
		RoleID:       os.Getenv(EnvRoleID),
		SecretID:     os.Getenv(EnvSecretID),
		RoleIDFile:   os.Getenv(EnvRoleIDFile),
		SecretIDFile: os.Getenv(EnvSecretIDFile),
		AppRoleMount: os.Getenv(EnvAppRoleMount),
		// Only "true" opts in: a typo must not turn verification off.
		InsecureSkipVerify: os.Getenv(EnvInsecureSkipVerify) == "true",
	}
}

// Store is the Vault backend. A background watcher renews its token (or logs
// in again with AppRole when the token can no longer be renewed) until Close.
type Store struct {
	client *vault.Client
	kv     *vault.KVv2
	cfg    Config
	log    *slog.Logger

	// login holds one token (a semaphore that a waiting request may give up
	// on): a login happens once, not once per concurrent request.
	login chan struct{}
	// mu guards the auth state; only one watcher runs at a time.
	mu          sync.Mutex
	authed      bool
	stopWatcher context.CancelFunc // stops the current watcher
	watchers    sync.WaitGroup
	// life ends on Close; it bounds the watchers and their logins.
	life context.Context
	end  context.CancelFunc
	// tokenInvalid is set while Vault calls the static token invalid
	// (expired or revoked): nothing but a new token helps, so readiness
	// reports it (Ping) and it is logged once as an error.
	tokenInvalid atomic.Bool
	// kvChecked is set once the mount is known to be KV v2 (or cannot be
	// checked with the token's policy); see checkMount.
	kvChecked atomic.Bool
	// loginRefused is set while Vault refuses the AppRole login (or the
	// pair cannot be read): readiness reports it (Ping).
	loginRefused atomic.Bool
	// loggedIn is when the last AppRole login succeeded (guarded by mu):
	// a plain "permission denied" logs in again only reloginEvery after it
	// (see do).
	loggedIn     time.Time
	reloginEvery time.Duration
}

// defaultReloginEvery is the least time between two logins that a plain "permission
// denied" (not "invalid token") brings about.
const defaultReloginEvery = 10 * time.Second

var _ store.Store = (*Store)(nil)

// New makes a store. It tries to authenticate right away, but a Vault that is
// down or sealed does not stop the service from starting: each request tries
// again and reports SERVICE_UNAVAILABLE meanwhile.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.Mount == "" {
		cfg.Mount = DefaultMount
	}
	cfg.Mount = strings.Trim(cfg.Mount, "/")
	if cfg.AppRoleMount == "" {
		cfg.AppRoleMount = "approle"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.RoleID != "" && cfg.RoleIDFile != "" || cfg.SecretID != "" && cfg.SecretIDFile != "" {
		return nil, fmt.Errorf("vaultstore: give the AppRole role id and secret id either as values (%s, %s) or as files (%s, %s), not both",
			EnvRoleID, EnvSecretID, EnvRoleIDFile, EnvSecretIDFile)
	}
	if cfg.Token == "" && (cfg.RoleID == "" && cfg.RoleIDFile == "" || cfg.SecretID == "" && cfg.SecretIDFile == "") {
		return nil, fmt.Errorf("vaultstore: no credentials for Vault: set %s, or %s and %s (or %s and %s)", EnvToken, EnvRoleID, EnvSecretID, EnvRoleIDFile, EnvSecretIDFile)
	}
	vc := vault.DefaultConfig() // reads VAULT_ADDR, VAULT_CACERT, VAULT_SKIP_VERIFY ...
	if vc.Error != nil {
		return nil, fmt.Errorf("vaultstore: %w", vc.Error)
	}
	if insecureTLS(vc) {
		if !cfg.InsecureSkipVerify {
			return nil, fmt.Errorf("vaultstore: VAULT_SKIP_VERIFY turns off the check of Vault's certificate, which would hand the token and every secret to whoever sits between: give Vault's CA in VAULT_CACERT instead, or set %s=true as well to accept it", EnvInsecureSkipVerify)
		}
		log.Warn("Vault's TLS certificate is not verified (VAULT_SKIP_VERIFY, " + EnvInsecureSkipVerify + ")")
	}
	if cfg.Address != "" {
		vc.Address = cfg.Address
	}
	vc.Timeout = cfg.Timeout
	switch {
	case cfg.MaxRetries < 0:
		vc.MaxRetries = 0
	case cfg.MaxRetries > 0:
		vc.MaxRetries = cfg.MaxRetries
	}
	client, err := vault.NewClient(vc)
	if err != nil {
		return nil, fmt.Errorf("vaultstore: %w", err)
	}
	// NewClient picks up VAULT_TOKEN from the environment: only the configured
	// credentials may be used.
	client.ClearToken()
	if cfg.Token != "" {
		client.SetToken(cfg.Token)
	}
	s := &Store{client: client, kv: client.KVv2(cfg.Mount), cfg: cfg, login: make(chan struct{}, 1), reloginEvery: defaultReloginEvery,
		log: log.With("backend", "vault", "vault_addr", vc.Address)}
	s.life, s.end = context.WithCancel(context.WithoutCancel(ctx))
	loginCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := s.ensureAuth(loginCtx, ""); err != nil {
		s.log.Warn("Vault not ready yet; will retry on each request", "error", err)
	} else if err := s.checkMount(loginCtx); apierr.Of(err) == apierr.Internal {
		s.log.Error("the Vault mount cannot hold the credentials; every request will fail until it is fixed", "error", err)
	}
	return s, nil
}

// insecureTLS reports whether the client's TLS settings skip the check of
// Vault's certificate (VAULT_SKIP_VERIFY).
func insecureTLS(vc *vault.Config) bool {
	if vc.HttpClient == nil {
		return false
	}
	t, ok := vc.HttpClient.Transport.(*http.Transport)
	return ok && t.TLSClientConfig != nil && t.TLSClientConfig.InsecureSkipVerify
}

// Name is "vault".
func (s *Store) Name() string { return "vault" }

// Close stops the token watcher.
func (s *Store) Close() {
	s.mu.Lock()
	s.end()
	s.mu.Unlock()
	s.watchers.Wait()
}

// Token is the token in use (tests check renewal and re-login with it).
func (s *Store) Token() string { return s.client.Token() }

func (s *Store) path(key string) string { return pathPrefix + key }

// ensureAuth logs in (AppRole) or looks the token up, and starts the watcher
// that keeps it alive. It does nothing once authenticated, unless stale names
// the token in use: that token was refused, so log in again.
func (s *Store) ensureAuth(ctx context.Context, stale string) error {
	if done, err := s.authDone(stale); done || err != nil {
		return err
	}
	// One login at a time, but a request waits for another's only as long
	// as its own deadline allows: a Vault that does not answer must not
	// hold a short request to a longer one's deadline (s.mu is not held
	// across the request to Vault for that reason).
	select {
	case s.login <- struct{}{}:
		defer func() { <-s.login }()
	case <-ctx.Done():
		return mapError(ctx.Err(), "", "waiting for the login to Vault")
	}
	if done, err := s.authDone(stale); done || err != nil {
		return err
	}
	secret, err := s.authenticate(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.life.Err() != nil {
		return apierr.New(apierr.ServiceUnavailable, "the Vault store is closed")
	}
	s.authed = true
	s.loggedIn = time.Now()
	if s.stopWatcher != nil {
		s.stopWatcher()
		s.stopWatcher = nil
	}
	if secret != nil {
		wctx, stop := context.WithCancel(s.life)
		s.stopWatcher = stop
		s.watchers.Add(1)
		go s.watch(wctx, secret)
	}
	return nil
}

// authDone reports whether no login is needed (see ensureAuth), or the
// store is closed.
func (s *Store) authDone(stale string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.life.Err() != nil {
		return false, apierr.New(apierr.ServiceUnavailable, "the Vault store is closed")
	}
	return s.authed && (stale == "" || s.client.Token() != stale), nil
}

// authenticate returns the auth secret to keep alive, or nil when the token
// needs no renewal (a token without TTL, such as a root token).
func (s *Store) authenticate(ctx context.Context) (*vault.Secret, error) {
	if s.cfg.Token == "" {
		secret, err := s.appRoleLogin(ctx)
		// Refused (or the pair unreadable): nothing works until the
		// operator gives a new secret id, so readiness says so (Ping).
		s.loginRefused.Store(apierr.Of(err) == apierr.Unauthorized)
		return secret, err
	}
	return s.lookupSelf(ctx)
}

// appRoleLogin is authenticate with AppRole.
func (s *Store) appRoleLogin(ctx context.Context) (*vault.Secret, error) {
	roleID, secretID, err := s.appRolePair()
	if err != nil {
		return nil, err
	}
	auth, err := approle.NewAppRoleAuth(roleID, &approle.SecretID{FromString: secretID}, approle.WithMountPath(s.cfg.AppRoleMount))
	if err != nil {
		return nil, apierr.Wrap(apierr.Internal, "Vault AppRole settings are not valid", err)
	}
	secret, err := s.client.Auth().Login(ctx, auth)
	if statusOf(err) == http.StatusBadRequest {
		// Vault answers 400 for an unknown role id or a wrong secret id.
		return nil, apierr.Wrap(apierr.Unauthorized, "Vault refused the AppRole login (check the role id and secret id)", err)
	}
	if err != nil {
		return nil, mapError(err, "auth/"+s.cfg.AppRoleMount+"/login", "logging in to Vault with AppRole")
	}
	if secret == nil || secret.Auth == nil {
		return nil, apierr.New(apierr.Unauthorized, "Vault AppRole login returned no token")
	}
	s.log.Info("logged in to Vault with AppRole", "ttl", time.Duration(secret.Auth.LeaseDuration)*time.Second, "renewable", secret.Auth.Renewable)
	return secret, nil
}

// lookupSelf is authenticate with a static token.
func (s *Store) lookupSelf(ctx context.Context) (*vault.Secret, error) {
	self, err := s.client.Auth().Token().LookupSelfWithContext(ctx)
	if err != nil {
		e := mapError(err, "auth/token/lookup-self", "looking up the Vault token")
		if invalidToken(err) {
			// Expired or revoked, not a policy without lookup-self.
			s.noteInvalid()
			return nil, e
		}
		if e.Code == apierr.Unauthorized {
			// A token without lookup-self permission may still reach the KV
			// paths; it just cannot be kept alive from here.
			s.log.Warn("the Vault token cannot look itself up; it will not be renewed")
			return nil, nil
		}
		return nil, e
	}
	ttl, _ := self.TokenTTL()
	renewable, _ := self.TokenIsRenewable()
	if ttl <= 0 {
		return nil, nil
	}
	if !renewable {
		s.log.Warn("the Vault token is not renewable: requests fail once it expires, until the service is restarted with a new one (use a periodic token or AppRole)",
			"ttl", ttl, "expires_at", time.Now().Add(ttl).UTC().Format(time.RFC3339))
		return nil, nil
	}
	return &vault.Secret{Auth: &vault.SecretAuth{ClientToken: s.cfg.Token, Renewable: true, LeaseDuration: int(ttl.Seconds())}}, nil
}

// appRolePair is the AppRole role id and secret id, read from their files
// when they are configured as files.
func (s *Store) appRolePair() (roleID, secretID string, err error) {
	roleID, secretID = s.cfg.RoleID, s.cfg.SecretID
	if s.cfg.RoleIDFile != "" {
		if roleID, err = readSecretFile(s.cfg.RoleIDFile, EnvRoleIDFile); err != nil {
			return "", "", err
		}
	}
	if s.cfg.SecretIDFile != "" {
		if secretID, err = readSecretFile(s.cfg.SecretIDFile, EnvSecretIDFile); err != nil {
			return "", "", err
		}
	}
	return roleID, secretID, nil
}

// readSecretFile reads a file holding one value: it must be a regular file
// (or a link to one, as a mounted secret is) that only its owner may read.
func readSecretFile(path, env string) (string, error) {
	st, err := os.Stat(path)
	if err == nil && !st.Mode().IsRegular() {
		err = errors.New("not a regular file")
	}
	if err == nil && st.Mode().Perm()&0o077 != 0 {
		err = fmt.Errorf("group or others may access it (mode %04o): chmod 600 it", st.Mode().Perm())
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(path)
	}
	if err == nil && len(bytes.TrimSpace(data)) == 0 {
		err = errors.New("it is empty")
	}
	if err != nil {
		return "", apierr.Wrap(apierr.Unauthorized, fmt.Sprintf("cannot read the Vault AppRole credentials from %s=%s", env, path), err)
	}
	return string(bytes.TrimSpace(data)), nil
}

// watch renews the token through Vault's LifetimeWatcher until ctx ends (Close,
// or a newer login replaced the token). When it can no longer renew (max TTL
// reached, token revoked, Vault down for too long) it logs in again with
// AppRole right away; a static token is looked up again on the next request.
func (s *Store) watch(ctx context.Context, secret *vault.Secret) {
	defer s.watchers.Done()
	w, err := s.client.NewLifetimeWatcher(&vault.LifetimeWatcherInput{Secret: secret})
	if err != nil {
		s.log.Error("cannot watch the Vault token", "error", err)
		s.expire(ctx)
		return
	}
	go w.Start()
	defer w.Stop()
	// When the token runs out: the last TTL Vault gave, from when it gave it.
	expires := time.Now().Add(time.Duration(secret.Auth.LeaseDuration) * time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-w.RenewCh():
			if r != nil && r.Secret != nil && r.Secret.Auth != nil {
				ttl := time.Duration(r.Secret.Auth.LeaseDuration) * time.Second
				expires = r.RenewedAt.Add(ttl)
				s.log.Debug("Vault token renewed", "ttl", ttl)
			}
		case err := <-w.DoneCh():
			if s.cfg.Token != "" {
				// A static token cannot be replaced from here: looking it up
				// again would only start another watcher that ends at once.
				// Say so now, before the requests start failing.
				attrs := []any{"expires_at", expires.UTC().Format(time.RFC3339)}
				if err != nil {
					attrs = append(attrs, "error", mapError(err, "auth/token/renew-self", "renewing the Vault token").Message)
				}
				s.log.Error("the Vault token (VAULT_TOKEN) can no longer be renewed (its max TTL, or it was revoked): requests fail once it expires, until the service is restarted with a new token (use a periodic token or AppRole)", attrs...)
				return
			}
			if err != nil {
				s.log.Warn("Vault token renewal stopped", "error", mapError(err, "auth/token/renew-self", "renewing the Vault token").Message)
			} else {
				s.log.Info("Vault token reached the end of its renewals")
			}
			if !s.expire(ctx) {
				return
			}
			// Log in before the token runs out, so no request meets it
			// expired. This watcher still counts in s.watchers, so Close
			// waits for the one the login starts as well.
			lctx, cancel := context.WithTimeout(s.life, s.cfg.Timeout)
			defer cancel()
			if err := s.ensureAuth(lctx, ""); err != nil {
				s.log.Warn("Vault AppRole login failed; will retry on the next request", "error", err)
			}
			return
		}
	}
}

// expire marks the token as needing authentication again, unless this
// watcher was superseded meanwhile (then it reports false).
func (s *Store) expire(ctx context.Context) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	s.authed = false
	return true
}

// do runs op with a valid token. With AppRole, a token that Vault refuses
// (revoked, or expired between two renewals) is replaced by a fresh login and
// op runs once more; a static token cannot be replaced, so it is not retried.
// A 403 that says "invalid token" always logs in again. One that says only
// "permission denied" is most often the policy denying the path, which a new
// token does not change; but some Vault versions say only that for an
// expired token too. So it logs in again only when the last login is
// reloginEvery old: a denied path answers its denial at once, without
// making a new Vault token on each request (a token flood).
func (s *Store) do(ctx context.Context, op func() error) error {
	if err := s.ensureAuth(ctx, ""); err != nil {
		return err
	}
	// The mount's check comes first, with the same token (and the same
	// new login when Vault refuses it).
	op = func(run func() error) func() error {
		return func() error {
			if err := s.checkMount(ctx); err != nil {
				return err
			}
			return run()
		}
	}(op)
	used := s.client.Token()
	err := op()
	if s.cfg.Token != "" {
		switch {
		case invalidToken(err):
			s.noteInvalid()
		case err == nil || statusOf(err) != 0:
			// Vault took the token (a refusal other than "invalid token"
			// is the policy's).
			s.tokenInvalid.Store(false)
		}
		return err
	}
	if statusOf(err) != http.StatusForbidden {
		return err
	}
	if !invalidToken(err) && !s.loginDue() {
		return err
	}
	s.log.Info("Vault refused the AppRole token; logging in again")
	if lerr := s.ensureAuth(ctx, used); lerr != nil {
		return err
	}
	return op()
}

// loginDue reports whether the last login is reloginEvery old.
func (s *Store) loginDue() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.loggedIn) >= s.reloginEvery
}

// noteInvalid records that Vault called the static token invalid, logging
// it as an error the first time (each request also says it, UNAUTHORIZED).
func (s *Store) noteInvalid() {
	if s.cfg.Token != "" && !s.tokenInvalid.Swap(true) {
		s.log.Error("Vault refuses the token (VAULT_TOKEN) as invalid: it expired or was revoked; restart the service with a new token (use a periodic token or AppRole)")
	}
}

// invalidToken reports whether Vault refused a request for its token
// itself (expired, revoked, unknown), which it tells apart from a policy
// that does not grant the path by adding "invalid token" to the 403.
func invalidToken(err error) bool {
	var re *vault.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusForbidden {
		return false
	}
	for _, e := range re.Errors {
		if strings.Contains(e, "invalid token") {
			return true
		}
	}
	return false
}

func statusOf(err error) int {
	var re *vault.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

var _ store.Versioned = (*Store)(nil)

// Get reads the latest version of key's record.
func (s *Store) Get(ctx context.Context, key string) (model.Credentials, time.Time, error) {
	creds, updated, _, err := s.GetVersion(ctx, key)
	return creds, updated, err
}

// GetVersion reads the latest version of key's record with its KV version
// number (0 when the key has none; a deleted latest version keeps its
// number, which a check-and-set write must name).
func (s *Store) GetVersion(ctx context.Context, key string) (model.Credentials, time.Time, uint64, error) {
	if err := store.CheckKey(key); err != nil {
		return model.Credentials{}, time.Time{}, 0, err
	}
	p := s.path(key)
	var sec *vault.KVSecret
	err := s.do(ctx, func() (err error) {
		sec, err = s.kv.Get(ctx, p)
		return err
	})
	if errors.Is(err, vault.ErrSecretNotFound) {
		return model.Credentials{}, time.Time{}, 0, store.ErrNotFound
	}
	if err != nil {
		return model.Credentials{}, time.Time{}, 0, mapError(err, s.cfg.Mount+"/data/"+p, "reading credentials from Vault")
	}
	var version uint64
	var updated time.Time
	if sec != nil && sec.VersionMetadata != nil {
		version = uint64(max(sec.VersionMetadata.Version, 0))
		updated = sec.VersionMetadata.CreatedTime.UTC()
	}
	if sec == nil || sec.Data == nil { // a deleted latest version
		return model.Credentials{}, time.Time{}, version, store.ErrNotFound
	}
	raw, err := json.Marshal(sec.Data)
	if err != nil {
		return model.Credentials{}, time.Time{}, 0, apierr.Wrap(apierr.Internal, "decoding the Vault record of "+key, err)
	}
	var creds model.Credentials
	if err := json.Unmarshal(raw, &creds); err != nil {
		return model.Credentials{}, time.Time{}, 0, apierr.Newf(apierr.Internal, "the Vault record of %s is malformed", key)
	}
	return creds, updated, version, nil
}

// Put writes creds as a new version of key's record (one request: the
// whole record or nothing).
func (s *Store) Put(ctx context.Context, key string, creds model.Credentials) error {
	return s.put(ctx, key, creds)
}

// PutIf is Put with Vault's check-and-set: written only while the record
// is at version (0: absent), else store.ErrChanged.
func (s *Store) PutIf(ctx context.Context, key string, creds model.Credentials, version uint64) error {
	return s.put(ctx, key, creds, vault.WithCheckAndSet(int(version)))
}

func (s *Store) put(ctx context.Context, key string, creds model.Credentials, opts ...vault.KVOption) error {
	if err := store.CheckKey(key); err != nil {
		return err
	}
	raw, err := json.Marshal(creds)
	if err != nil {
		return apierr.Wrap(apierr.Internal, "encoding credentials", err)
	}
	var data map[string]any
	if err := json.Unmarshal(raw, &data); err != nil {
		return apierr.Wrap(apierr.Internal, "encoding credentials", err)
	}
	p := s.path(key)
	err = s.do(ctx, func() error { _, err := s.kv.Put(ctx, p, data, opts...); return err })
	if casMismatch(err) {
		return store.ErrChanged
	}
	if err != nil {
		return mapError(err, s.cfg.Mount+"/data/"+p, "writing credentials to Vault")
	}
	return nil
}

// casMismatch reports whether Vault refused a write for its check-and-set
// version (400, "check-and-set parameter did not match the current version").
func casMismatch(err error) bool {
	var re *vault.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusBadRequest {
		return false
	}
	for _, e := range re.Errors {
		if strings.Contains(e, "check-and-set") {
			return true
		}
	}
	return false
}

// Delete removes key's record with every version (metadata delete).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := store.CheckKey(key); err != nil {
		return err
	}
	p := s.path(key)
	if err := s.do(ctx, func() error { return s.kv.DeleteMetadata(ctx, p) }); err != nil {
		return mapError(err, s.cfg.Mount+"/metadata/"+p, "deleting credentials from Vault")
	}
	return nil
}

// mapError turns a Vault client error into the contract. Messages name the
// path, never the token; Vault's own text stays in the unexported cause.
func mapError(err error, path, doing string) *apierr.Error {
	var ae *apierr.Error
	if errors.As(err, &ae) { // already mapped (a login on the way)
		return ae
	}
	var re *vault.ResponseError
	if errors.As(err, &re) {
		switch {
		case invalidToken(err):
			return apierr.Wrap(apierr.Unauthorized, "Vault refuses the credential service's token as invalid: it expired or was revoked ("+doing+"); the operator must give the service a new one", err)
		case re.StatusCode == http.StatusForbidden:
			return apierr.Wrap(apierr.Unauthorized, "Vault denied access to "+path+" (check the token's policy)", err)
		case re.StatusCode == http.StatusUnauthorized:
			return apierr.Wrap(apierr.Unauthorized, "Vault refused the credentials for "+path, err)
		case re.StatusCode == http.StatusServiceUnavailable:
			return apierr.Wrap(apierr.ServiceUnavailable, "Vault is sealed or unavailable ("+doing+")", err)
		case re.StatusCode == http.StatusTooManyRequests:
			return apierr.Wrap(apierr.RateLimited, "Vault is rate limiting requests ("+doing+")", err)
		case re.StatusCode == http.StatusNotFound:
			return apierr.Wrap(apierr.NotFound, "Vault has no "+path, err)
		case re.StatusCode >= 500:
			return apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("Vault failed with status %d (%s)", re.StatusCode, doing), err)
		}
		return apierr.Wrap(apierr.Internal, fmt.Sprintf("Vault answered status %d (%s)", re.StatusCode, doing), err)
	}
	var ue *url.Error
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return apierr.Wrap(apierr.Network, doing+": cancelled", err)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return apierr.Wrap(apierr.ServiceUnavailable, "Vault did not answer in time ("+doing+")", err)
	case errors.As(err, &ue), errors.As(err, &ne):
		return apierr.Wrap(apierr.ServiceUnavailable, "Vault is not reachable ("+doing+")", err)
	}
	// The retrying client reports exhausted retries as a plain error.
	if strings.Contains(err.Error(), "giving up after") || strings.Contains(err.Error(), "connection refused") {
		return apierr.Wrap(apierr.ServiceUnavailable, "Vault is not reachable ("+doing+")", err)
	}
	return apierr.Wrap(apierr.Internal, doing+" failed", err)
}
