package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// errCodeInsufficientResources is JetStream's answer to a stream whose
// MaxBytes the server cannot reserve: the server (or account) has less
// storage left than the bound asks for. A server's default storage is a
// share of the free disk (75 %), so a bound that fits one machine is
// refused on a fuller one.
const (
	errCodeInsufficientResources jetstream.ErrorCode = 10047
	errCodeNoPeers               jetstream.ErrorCode = 10005
)

// MinFitBytes is the smallest bound FitMaxBytes offers a new stream before
// it gives up: a smaller one would hold too little to be of use (the audit
// stream's oldest records would age out within hours).
const MinFitBytes = 64 << 20

// StorageAdvice is what an operator can do when NATS has too little
// storage for the bounds mcpbus asks for.
const StorageAdvice = "free disk space under the NATS store dir (a NATS server without max_file_store offers 75% of the free disk), " +
	"or give NATS more storage (mcpbus up --nats-max-store; max_file_store on a NATS server), then restart"

// StorageError is a stream (or bucket) the NATS server has no room for:
// not even the smallest bound FitMaxBytes offers fits. It wraps
// JetStream's refusal.
type StorageError struct {
	// What is refused ("stream MCPBUS_EVENTS").
	What string
	// Asked is the bound asked for; Tried the smallest one offered.
	Asked, Tried int64
	Err          error
}

func (e *StorageError) Error() string {
	return fmt.Sprintf("%s: the NATS server has no room for it: %s asked, and not even %s fits (its storage is full, or its disk nearly so): %s (%v)",
		e.What, Size(e.Asked), Size(e.Tried), StorageAdvice, e.Err)
}

func (e *StorageError) Unwrap() error { return e.Err }

// FitMaxBytes runs create with maxBytes and, while the server refuses that
// reservation for want of storage, again with half of it. A new stream
// (bound reports it missing) goes down to MinFitBytes; a bound that fit may
// take most of what was left, so the stream is then bounded at a quarter
// of it (create again: shrinking a stream just made drops nothing; a
// stream that cannot be updated keeps what it got), leaving room for the
// assets made after it. Not even MinFitBytes fitting is a *StorageError.
//
// An existing stream is never made smaller than it is (that would drop its
// oldest records): a raise the server refuses is halved only down to the
// stream's own bound, and failing that the stream keeps its bound (the
// refusal is returned, and the caller's lookup uses the stream as it is). A
// stream whose bound is unknown or unlimited is not fitted at all. Either
// way a bound smaller than asked is logged, so an operator sees it and can
// give the server more storage. Other errors return as they are (Setup
// retries them). Call it inside CreateAsset's create, so the halvings do
// not each wait out a lookup.
func FitMaxBytes[T any](ctx context.Context, log *slog.Logger, what string, maxBytes int64,
	create func(ctx context.Context, maxBytes int64) (T, error), bound func(ctx context.Context) (maxBytes int64, found bool)) (T, error) {
	want := maxBytes
	v, err := create(ctx, maxBytes)
	if !InsufficientStorage(err) {
		return v, err
	}
	have, found := bound(ctx)
	floor, lowest := int64(MinFitBytes), int64(MinFitBytes)
	if found {
		if have <= 0 || have >= want {
			// Unknown (an unanswered lookup), unlimited, or not a raise:
			// any bound offered would shrink it.
			warnKept(log, what, want, have)
			return v, err
		}
		// Only more than it has.
		floor, lowest = have, have+1
	}
	for InsufficientStorage(err) && maxBytes/2 >= lowest {
		maxBytes /= 2
		v, err = create(ctx, maxBytes)
	}
	if InsufficientStorage(err) {
		if found {
			warnKept(log, what, want, have)
			return v, err
		}
		return v, &StorageError{What: what, Asked: want, Tried: maxBytes, Err: err}
	}
	if err != nil {
		return v, err
	}
	if share := max(maxBytes/fitShare, floor); share < maxBytes {
		if shrunk, err := create(ctx, share); err == nil {
			v, maxBytes = shrunk, share
		}
	}
	if log != nil {
		log.Warn(fmt.Sprintf("%s: the NATS server has no room for the %s asked: bounded at %s; for the full size, %s",
			what, Size(want), Size(maxBytes), StorageAdvice),
			"step", what, "asked_bytes", want, "max_bytes", maxBytes)
	}
	return v, nil
}

// warnKept logs an existing stream keeping a bound smaller than asked.
func warnKept(log *slog.Logger, what string, want, have int64) {
	if log == nil || have >= want {
		return
	}
	kept := "its bound"
	if have > 0 {
		kept = Size(have)
	}
	log.Warn(fmt.Sprintf("%s: the NATS server has no room for the %s asked: the stream keeps %s; for the full size, %s",
		what, Size(want), kept, StorageAdvice),
		"step", what, "asked_bytes", want, "max_bytes", have)
}

// fitShare is the part of the storage left that a fitted stream takes.
const fitShare = 4

// Budget scales bounds (the MaxBytes of the streams one server is to hold)
// down, all in the same proportion, so that together they reserve at most
// two thirds of store bytes, the server's storage; none below MinFitBytes
// (so on a server under about 480 MiB they may still not fit, and
// FitMaxBytes then has the last word). The third left is room for the
// buckets, which reserve nothing but need storage left to be made or
// written: a server whose reservations fill it refuses them all. scaled
// reports whether any bound changed; a store of 0 or less (unknown) or
// bounds that fit leave them as they are, as does a bound of 0 or less
// (the default, or none).
//
// A stream fitted as it is made cannot see what the streams made after it
// will need: the first would take what it asks and leave the others
// nothing. Whoever knows both the storage and every stream (mcpbus up,
// which embeds the server) sizes them together with this.
func Budget(store int64, bounds ...int64) (sized []int64, scaled bool) {
	sized = append([]int64(nil), bounds...)
	var sum int64
	for _, b := range bounds {
		if b > 0 {
			sum += b
		}
	}
	budget := store / budgetDen * budgetNum
	if store <= 0 || sum <= budget {
		return sized, false
	}
	for i, b := range bounds {
		if b <= 0 {
			continue
		}
		// In floating point: a bound times the budget overflows int64.
		n := int64(float64(b) * float64(budget) / float64(sum))
		sized[i] = max(n&^(1<<20-1), MinFitBytes) // whole MiB
	}
	return sized, true
}

// budgetNum/budgetDen is the share of a server's storage Budget gives the
// streams' bounds.
const budgetNum, budgetDen = 2, 3

// InsufficientStorage reports whether err is JetStream refusing a stream's
// storage reservation: on one server JSStorageResourcesExceeded (10047), on
// a cluster the placement error when no peer has the storage left.
func InsufficientStorage(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == errCodeInsufficientResources ||
		apiErr.ErrorCode == errCodeNoPeers && strings.Contains(apiErr.Description, "insufficient storage")
}

// serverOutOfStorage reports whether err is one server's own refusal
// (10047): unlike a cluster's placement error, which rests on the stats
// the nodes last exchanged and clears once they have, it stays until
// storage is freed.
func serverOutOfStorage(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeInsufficientResources
}

// Size is n bytes for people: "1 GiB", "96 MiB", "512 B".
func Size(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i, f := 0, float64(n)
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d %s", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// JetStream's refusals of a write for want of room.
const (
	errCodeServerFull   jetstream.ErrorCode = 10023 // the server's storage is used up
	errCodeAccountFull  jetstream.ErrorCode = 10002 // the account's
	errCodeStoreFailed  jetstream.ErrorCode = 10077 // the stream's own limits (DiscardNew), among other store failures
	storeFailedMaxBytes                     = "maximum bytes exceeded"
	storeFailedMaxMsgs                      = "maximum messages exceeded"
)

// StoreFull reports whether err is JetStream refusing a write because a
// stream (or bucket) holds its bound and discards new messages, or because
// the server or account has no storage left: a write that may pass once
// something is deleted or expires, not a fault to retry at once.
func StoreFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case errCodeServerFull, errCodeAccountFull:
		return true
	case errCodeStoreFailed:
		return strings.Contains(apiErr.Description, storeFailedMaxBytes) || strings.Contains(apiErr.Description, storeFailedMaxMsgs)
	}
	return false
}
