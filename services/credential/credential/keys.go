package credential

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/secretfile"
	"github.com/mcpbus/mcpbus/services/credential/store"
	"github.com/mcpbus/mcpbus/services/credential/store/filestore"
)

// The service's curve (xkey) key pair: writers seal secrets to its public
// key (mcp.v1.cred.key), and resolve replies are sealed with it. Every
// instance of the service must hold the same pair, since any of them may get
// a sealed request, so the pair is made once and kept with the secrets:
//
//   - file backend: <data-dir>/secrets/curve.xk, the seed ("SX…"), mode 0600
//     in the store's 0700 directory, created with O_EXCL so that instances
//     starting together on one data dir agree (the loser reads the winner's).
//     It sits next to the store's own AES key with the same protection;
//     encrypting it with that key would add nothing.
//   - any other store (Vault): through the store interface, as the record of
//     the reserved id KeyRecordID (Vault: <mount>/mcpbus/<KeyRecordID>, a KV v2
//     secret the existing policy already covers; token renewal, AppRole and
//     error mapping are the store's). store.Store has no create-if-absent,
//     so a new pair is written, then read back after KeySettle: of instances
//     racing at first start, all adopt the last write. An instance that still
//     ends up with another pair reloads it when a blob does not open. A
//     store with check-and-set (store.Versioned: Vault) writes the pair only
//     where there is none, so exactly one first write lands.
//
// The cred.* verbs refuse KeyRecordID, so the pair never leaves the service.

// KeyFile is the name of the key pair's file in the file store's directory.
const KeyFile = "curve.xk"

// KeyRecordID is the reserved record id the pair is kept under in a store
// other than the file store (never a config id: those are random uuids).
const KeyRecordID = "00000000-0000-0000-0000-000000000000"

// keySeedName is the env entry of the reserved record holding the seed.
const keySeedName = "MCPBUS_CREDENTIAL_CURVE_SEED"

// keyReloadEvery bounds how often a blob that does not open makes the
// service read its key pair again.
const keyReloadEvery = 5 * time.Second

// keyRing holds the service's key pair, loaded on first use (Vault may be
// down when the service starts).
type keyRing struct {
	load func(ctx context.Context) (nkeys.KeyPair, error)
	// loading holds one token: one load at a time, which a request waits
	// for only until its own deadline (a Vault that does not answer must
	// not hold every request to the deadline of the one loading).
	loading chan struct{}

	mu     sync.Mutex // guards the fields below, never held across a load
	kp     nkeys.KeyPair
	pub    string
	loaded time.Time
}

func newKeyRing(load func(ctx context.Context) (nkeys.KeyPair, error)) *keyRing {
	return &keyRing{load: load, loading: make(chan struct{}, 1)}
}

// current returns the pair loaded, if any.
func (k *keyRing) current() (nkeys.KeyPair, string, time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kp, k.pub, k.loaded
}

// acquire takes the load token, or gives up when ctx ends.
func (k *keyRing) acquire(ctx context.Context) error {
	select {
	case k.loading <- struct{}{}:
		return nil
	case <-ctx.Done():
		return apierr.Wrap(apierr.ServiceUnavailable, "the credential service's key pair is still being read from its store (Vault did not answer in time)", ctx.Err())
	}
}

// get returns the pair, loading it when it is not loaded yet.
func (k *keyRing) get(ctx context.Context) (nkeys.KeyPair, string, error) {
	if kp, pub, _ := k.current(); kp != nil {
		return kp, pub, nil
	}
	if err := k.acquire(ctx); err != nil {
		return nil, "", err
	}
	defer func() { <-k.loading }()
	if kp, pub, _ := k.current(); kp != nil { // loaded meanwhile
		return kp, pub, nil
	}
	return k.loadNow(ctx)
}

// reload reads the pair again (at most every keyReloadEvery) and reports
// whether it changed.
func (k *keyRing) reload(ctx context.Context) bool {
	if err := k.acquire(ctx); err != nil {
		return false
	}
	defer func() { <-k.loading }()
	_, old, loaded := k.current()
	if time.Since(loaded) < keyReloadEvery {
		return false
	}
	_, pub, err := k.loadNow(ctx)
	return err == nil && pub != old
}

// loadNow loads the pair and keeps it; the caller holds the load token.
func (k *keyRing) loadNow(ctx context.Context) (nkeys.KeyPair, string, error) {
	kp, err := k.load(ctx)
	if err != nil {
		return nil, "", err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, "", apierr.Wrap(apierr.Internal, "credential service curve public key", err)
	}
	k.mu.Lock()
	k.kp, k.pub, k.loaded = kp, pub, time.Now()
	k.mu.Unlock()
	return kp, pub, nil
}

// keyLoader picks where the pair of st is kept.
func keyLoader(st store.Store, settle time.Duration) func(context.Context) (nkeys.KeyPair, error) {
	if fs, ok := st.(*filestore.Store); ok {
		path := filepath.Join(fs.Dir(), KeyFile)
		return func(context.Context) (nkeys.KeyPair, error) { return loadKeyFile(path) }
	}
	return func(ctx context.Context) (nkeys.KeyPair, error) { return loadKeyRecord(ctx, st, settle) }
}

// loadKeyFile reads the pair at path (a regular file readable by its owner
// only), creating it when it does not exist; instances starting together on
// one data dir end with the same pair.
func loadKeyFile(path string) (nkeys.KeyPair, error) {
	data, err := secretfile.LoadOrCreate(path, 256, func() ([]byte, error) {
		_, seed, err := newCurvePair()
		if err != nil {
			return nil, err
		}
		return append(seed, '\n'), nil
	})
	if err != nil {
		return nil, fmt.Errorf("curve key: %w", err)
	}
	defer clear(data)
	kp, err := nkeys.FromCurveSeed(bytes.TrimSpace(data))
	if err != nil {
		return nil, fmt.Errorf("curve key %s does not hold a curve seed (SX…)", path)
	}
	return kp, nil
}

// loadKeyRecord reads the pair from the reserved record of st, creating it
// when there is none (see the comment at the top for the race): a record
// written within the last two settle times may still be replaced by another
// instance's first write, so it is read again after settle.
func loadKeyRecord(ctx context.Context, st store.Store, settle time.Duration) (nkeys.KeyPair, error) {
	if vs, ok := st.(store.Versioned); ok {
		return loadKeyRecordOnce(ctx, st, vs)
	}
	kp, updated, err := readKeyRecord(ctx, st)
	switch {
	case err == nil && !young(updated, settle):
		return kp, nil
	case err == nil:
	case errors.Is(err, store.ErrNotFound):
		_, seed, err := newCurvePair()
		if err != nil {
			return nil, err
		}
		err = st.Put(ctx, KeyRecordID, model.Credentials{Env: map[string]string{keySeedName: string(seed)}})
		clear(seed)
		if err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return nil, apierr.Wrap(apierr.Network, "cancelled while loading the curve key", ctx.Err())
	}
	// The last of several first writes wins: adopt what is stored.
	kp, _, err = readKeyRecord(ctx, st)
	return kp, err
}

// loadKeyRecordOnce is loadKeyRecord on a store with check-and-set (Vault):
// the pair is written only where there is none, so of instances racing at
// first start exactly one write lands, however slow the store, and the
// others read it.
func loadKeyRecordOnce(ctx context.Context, st store.Store, vs store.Versioned) (nkeys.KeyPair, error) {
	for range 3 {
		_, _, version, err := vs.GetVersion(ctx, KeyRecordID)
		if err == nil {
			kp, _, err := readKeyRecord(ctx, st)
			return kp, err
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		kp, seed, err := newCurvePair()
		if err != nil {
			return nil, err
		}
		err = vs.PutIf(ctx, KeyRecordID, model.Credentials{Env: map[string]string{keySeedName: string(seed)}}, version)
		clear(seed)
		if err == nil {
			return kp, nil
		}
		if !errors.Is(err, store.ErrChanged) {
			return nil, err
		}
		// Another instance wrote it first: read theirs.
	}
	return nil, apierr.New(apierr.Conflict, "the credential service's key record keeps changing; try again")
}

// young reports whether a record written at updated may still be part of a
// first-start race (a zero time is unknown: treated as young).
func young(updated time.Time, settle time.Duration) bool {
	age := time.Since(updated)
	return updated.IsZero() || (age < 2*settle && age > -2*settle)
}

func readKeyRecord(ctx context.Context, st store.Store) (nkeys.KeyPair, time.Time, error) {
	rec, updated, err := st.Get(ctx, KeyRecordID)
	if err != nil {
		return nil, time.Time{}, err
	}
	seed := rec.Env[keySeedName]
	kp, err := nkeys.FromCurveSeed([]byte(seed))
	if err != nil {
		return nil, time.Time{}, apierr.Newf(apierr.Internal, "the credential service's key record (%s) does not hold a curve seed", KeyRecordID)
	}
	return kp, updated, nil
}

func newCurvePair() (nkeys.KeyPair, []byte, error) {
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		return nil, nil, fmt.Errorf("creating the curve key pair: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, nil, fmt.Errorf("curve seed: %w", err)
	}
	return kp, seed, nil
}

// checkID accepts a server id: a canonical uuid other than the reserved one.
func checkID(id string) error {
	if err := store.CheckID(id); err != nil {
		return err
	}
	if id == KeyRecordID {
		return apierr.Invalid("server_id", "server_id "+KeyRecordID+" is reserved by the credential service")
	}
	return nil
}
