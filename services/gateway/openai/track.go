package openai

import (
	"context"
	"errors"
	"sync"
)

// Causes of a completion ended by the gateway rather than by its client.
var (
	errRevoked  = errors.New("the API key was revoked")
	errStopping = errors.New("the gateway is stopping")
)

// tracker holds the cancel functions of the running completions by API key
// id, so that revoking a key or stopping the gateway ends them at once (and
// cancels their turns) instead of letting them run to the turn timeout.
type tracker struct {
	mu      sync.Mutex
	next    uint64
	byKey   map[string]map[uint64]context.CancelCauseFunc
	stopped bool
}

// add derives a context that ends, with errRevoked or errStopping as its
// cause, when the key is dropped or stop is called; done forgets it (call it
// when the completion ends). ok is false once stopping.
func (tr *tracker) add(ctx context.Context, keyID string) (_ context.Context, done func(), ok bool) {
	ctx, cancel := context.WithCancelCause(ctx)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.stopped {
		cancel(errStopping)
		return ctx, func() {}, false
	}
	if tr.byKey == nil {
		tr.byKey = map[string]map[uint64]context.CancelCauseFunc{}
	}
	tr.next++
	id := tr.next
	if tr.byKey[keyID] == nil {
		tr.byKey[keyID] = map[uint64]context.CancelCauseFunc{}
	}
	tr.byKey[keyID][id] = cancel
	return ctx, func() {
		cancel(nil)
		tr.mu.Lock()
		defer tr.mu.Unlock()
		delete(tr.byKey[keyID], id)
		if len(tr.byKey[keyID]) == 0 {
			delete(tr.byKey, keyID)
		}
	}, true
}

// drop ends the completions of keyID.
func (tr *tracker) drop(keyID string) {
	tr.mu.Lock()
	set := tr.byKey[keyID]
	delete(tr.byKey, keyID)
	tr.mu.Unlock()
	for _, cancel := range set {
		cancel(errRevoked)
	}
}

// stop ends every completion and refuses new ones.
func (tr *tracker) stop() {
	tr.mu.Lock()
	tr.stopped = true
	all := tr.byKey
	tr.byKey = nil
	tr.mu.Unlock()
	for _, set := range all {
		for _, cancel := range set {
			cancel(errStopping)
		}
	}
}
