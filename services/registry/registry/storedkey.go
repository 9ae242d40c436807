package registry

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
)

// CredResolver fetches a credential record from the credential service
// (libs/credclient.Resolver: the reply is sealed to this service's key).
type CredResolver interface {
	Resolve(ctx context.Context, serverID string) (model.ResolvedCredentials, error)
}

// storedKey is the Smithery key kept in the credential service, read at most
// once a minute so a search does not wait on it every time.
type storedKey struct {
	resolver CredResolver
	ttl      time.Duration

	mu  sync.Mutex
	key string
	at  time.Time
}

func (k *storedKey) get(ctx context.Context) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	// A found key is reused for ttl; a missing one is asked for again after a
	// few seconds, so a key stored just now is used at once.
	ttl := k.ttl
	if k.key == "" {
		ttl = 2 * time.Second
	}
	if !k.at.IsZero() && time.Since(k.at) < ttl {
		return k.key
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	creds, err := k.resolver.Resolve(ctx, model.RegistryCredentialsID)
	k.at = time.Now()
	if err != nil {
		// No key stored, or the credential service is away: search without
		// a key (Smithery answers 401 and the reply says so for that source).
		k.key = ""
		return ""
	}
	k.key = creds.Env[model.SmitheryKeyEnv]
	return k.key
}

// apply adds the stored key, if any, as a bearer token.
func (k *storedKey) apply(r *http.Request) {
	if key := k.get(r.Context()); key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
}
