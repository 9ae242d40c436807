package embednats

import (
	"encoding/base64"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// nkeyAuth authenticates clients against a set of nkey users that can change
// while the server runs. nats-server's own way, a configuration reload,
// writes the server's options while stream goroutines read them unguarded
// (a direct get reads MaxPending without a lock, nats-server 2.15): a data
// race each time an agent is created or revoked under load. Checking the
// users here needs no reload.
type nkeyAuth struct {
	mu    sync.RWMutex
	users map[string]*server.NkeyUser
}

func newNkeyAuth(users []*server.NkeyUser) *nkeyAuth {
	a := &nkeyAuth{}
	a.set(users)
	return a
}

// set replaces the users.
func (a *nkeyAuth) set(users []*server.NkeyUser) {
	m := make(map[string]*server.NkeyUser, len(users))
	for _, u := range users {
		m[u.Nkey] = u
	}
	a.mu.Lock()
	a.users = m
	a.mu.Unlock()
}

// has reports whether nkey is a user.
func (a *nkeyAuth) has(nkey string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.users[nkey] != nil
}

// nkeyRegistrar is the part of nats-server's client that applies an nkey
// user's permissions (the same call its own nkey authentication makes).
type nkeyRegistrar interface {
	RegisterNkeyUser(*server.NkeyUser) error
}

// Check accepts a client that presents a known nkey and a valid signature
// of the nonce the server sent it, as nats-server's nkey authentication
// does, and gives it that user's permissions.
func (a *nkeyAuth) Check(c server.ClientAuthentication) bool {
	opts := c.GetOpts()
	if opts == nil || opts.Nkey == "" || opts.Sig == "" {
		return false
	}
	a.mu.RLock()
	user := a.users[opts.Nkey]
	a.mu.RUnlock()
	if user == nil {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(opts.Sig)
	if err != nil {
		if sig, err = base64.StdEncoding.DecodeString(opts.Sig); err != nil {
			return false
		}
	}
	pub, err := nkeys.FromPublicKey(opts.Nkey)
	if err != nil {
		return false
	}
	nonce := c.GetNonce()
	if len(nonce) == 0 || pub.Verify(nonce, sig) != nil {
		return false
	}
	r, ok := c.(nkeyRegistrar)
	return ok && r.RegisterNkeyUser(user) == nil
}
