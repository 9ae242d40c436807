package bus

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// errCodeInsufficientResources is JetStream's answer to a stream whose
// MaxBytes the server cannot reserve: the server (or account) has less
// storage left than the bound asks for. A server's default storage is a
// share of the free disk, so a bound that fits one machine is refused on a
// fuller one.
const (
	errCodeInsufficientResources jetstream.ErrorCode = 10047
	errCodeNoPeers               jetstream.ErrorCode = 10005
)

// minFitBytes is the smallest bound FitMaxBytes offers before it gives up.
const minFitBytes = 16 << 20

// FitMaxBytes runs create with maxBytes and, while the server refuses that
// reservation for want of storage, again with half of it (down to
// minFitBytes). A bound that fit may take most of what was left, so the new
// stream is then bounded at a quarter of it (create again: shrinking a
// stream just made drops nothing; a stream that cannot be updated keeps
// what it got), leaving room for the assets made after it. Only a stream
// that does not exist yet is fitted (exists): a smaller bound must not
// shrink an existing one, which keeps its bound (the refusal is returned,
// and the caller's lookup uses the stream as it is). A stream made smaller
// than asked is logged, so an operator sees the bound it got and can give
// the server more storage (JetStream max_file_store) or ask for less. Other
// errors return as they are (Setup retries them). Call it inside
// CreateAsset's create, so the halvings do not each wait out a lookup.
func FitMaxBytes[T any](ctx context.Context, log *slog.Logger, what string, maxBytes int64,
	create func(ctx context.Context, maxBytes int64) (T, error), exists func(ctx context.Context) bool) (T, error) {
	want := maxBytes
	v, err := create(ctx, maxBytes)
	if !InsufficientStorage(err) || exists(ctx) {
		return v, err
	}
	for InsufficientStorage(err) && maxBytes/2 >= minFitBytes {
		maxBytes /= 2
		v, err = create(ctx, maxBytes)
	}
	if err != nil {
		return v, err
	}
	if share := max(maxBytes/fitShare, minFitBytes); share < maxBytes {
		if shrunk, err := create(ctx, share); err == nil {
			v, maxBytes = shrunk, share
		}
	}
	if log != nil {
		log.Warn("the NATS server has less storage than this bound asks for: made smaller",
			"step", what, "asked_bytes", want, "max_bytes", maxBytes)
	}
	return v, nil
}

// fitShare is the part of the storage left that a fitted stream takes.
const fitShare = 4

// InsufficientStorage reports whether err is JetStream refusing a stream's
// storage reservation: on one server JSInsufficientResources, on a cluster
// the placement error when no peer has the storage left.
func InsufficientStorage(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == errCodeInsufficientResources ||
		apiErr.ErrorCode == errCodeNoPeers && strings.Contains(apiErr.Description, "insufficient storage")
}
