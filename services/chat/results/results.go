// Package results keeps the full text of tool results too large for the
// model's context (issue 14) in the JetStream Object Store
// bus.ObjectChatResults, where the built-in tool read_result reads them back
// by ranges. The conversation log keeps only a reference, so a result may be
// far larger than a log entry (a JetStream message) could hold.
//
// Object names are <conversation>/<hex sha256(call id)[:32]>: call ids are
// written by models and providers, so they are hashed rather than trusted
// as names, and the conversation prefix lets DeleteConversation find a
// conversation's objects.
package results

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// DefaultMaxBytes bounds the store's size: when full, puts are refused
// (the loop then keeps a shorter copy in the log entry).
const DefaultMaxBytes = 1 << 30

// Options configure a Store; zero values take the defaults.
type Options struct {
	// Replicas of the store (1 embedded, 3 on a cluster); an existing
	// store's higher replica count is kept.
	Replicas int
	// MaxBytes bounds the store (default DefaultMaxBytes); an existing
	// store's larger bound is kept.
	MaxBytes int64
	// TTL drops results older than it (0: kept until their conversation is
	// deleted).
	TTL time.Duration
	// Logger hears what start-up waits for.
	Logger *slog.Logger
}

// Store keeps cut tool results. It is safe for concurrent use; it implements
// loop.ResultStore.
type Store struct {
	obs jetstream.ObjectStore
}

// Open creates (or opens) the object store and returns the Store. It
// retries until ctx ends while JetStream settles (bus.Setup).
func Open(ctx context.Context, js jetstream.JetStream, opts Options) (*Store, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	cfg := jetstream.ObjectStoreConfig{
		Bucket:      bus.ObjectChatResults,
		Description: "mcpbus chat: full text of tool results cut for the model (<conversation>/<call>)",
		TTL:         opts.TTL,
		MaxBytes:    opts.MaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    max(opts.Replicas, 1),
		Compression: true,
	}
	s := &Store{}
	err := bus.Setup(ctx, opts.Logger, "object store "+cfg.Bucket, func(ctx context.Context) error {
		// Never lower the replicas of a store a cluster made redundant. (An
		// info request about a store being made goes unanswered: bounded.)
		ictx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		if st, err := js.Stream(ictx, "OBJ_"+cfg.Bucket); err == nil && st.CachedInfo().Config.Replicas > cfg.Replicas {
			cfg.Replicas = st.CachedInfo().Config.Replicas
		}
		cancel()
		// One made by another instance with other settings is used as it is.
		var err error
		s.obs, err = bus.CreateAsset(ctx, js, "OBJ_"+cfg.Bucket,
			func(ctx context.Context) (jetstream.ObjectStore, error) {
				// A store made larger keeps its bound (bus.KeepBound).
				cfg.MaxBytes = bus.KeepBound(ctx, js, "OBJ_"+cfg.Bucket, cfg.MaxBytes)
				return bus.FitMaxBytes(ctx, opts.Logger, "object store "+cfg.Bucket, cfg.MaxBytes,
					func(ctx context.Context, maxBytes int64) (jetstream.ObjectStore, error) {
						cfg.MaxBytes = maxBytes
						return js.CreateOrUpdateObjectStore(ctx, cfg)
					}, bus.StreamBound(js, "OBJ_"+cfg.Bucket))
			},
			func(ctx context.Context) (jetstream.ObjectStore, error) { return js.ObjectStore(ctx, cfg.Bucket) })
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Name is the object name of a call's result.
func Name(conversation, callID string) string {
	sum := sha256.Sum256([]byte(callID))
	return conversation + "/" + hex.EncodeToString(sum[:16])
}

func check(conversation, callID string) error {
	if !model.ValidConversationID(conversation) {
		return apierr.Invalid("conversation", fmt.Sprintf("conversation %q must be a slug or a uuid", conversation))
	}
	if callID == "" {
		return apierr.Invalid("call_id", "a call id is required")
	}
	return nil
}

// Put stores the full text of a call's result, replacing any earlier one
// (a call run again after a crash stores the same name).
func (s *Store) Put(ctx context.Context, conversation, callID, text string) error {
	if err := check(conversation, callID); err != nil {
		return err
	}
	if _, err := s.obs.PutString(ctx, Name(conversation, callID), text); err != nil {
		return bus.JetStreamErr("storing the result of call "+callID, err)
	}
	return nil
}

// Get returns the stored text of a call's result (NOT_FOUND when there is
// none).
func (s *Store) Get(ctx context.Context, conversation, callID string) (string, error) {
	if err := check(conversation, callID); err != nil {
		return "", err
	}
	text, err := s.obs.GetString(ctx, Name(conversation, callID))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return "", apierr.Newf(apierr.NotFound, "no stored result of call %s in conversation %s", callID, conversation)
	}
	if err != nil {
		return "", bus.JetStreamErr("reading the result of call "+callID, err)
	}
	return text, nil
}

// DeleteConversation deletes every stored result of conversation; none is
// not an error. It lists the whole store's metadata (object names are not
// subject tokens a filter could select), which is cheap next to the data.
func (s *Store) DeleteConversation(ctx context.Context, conversation string) error {
	if !model.ValidConversationID(conversation) {
		return apierr.Invalid("conversation", fmt.Sprintf("conversation %q must be a slug or a uuid", conversation))
	}
	objs, err := s.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		return bus.JetStreamErr("listing the results of conversation "+conversation, err)
	}
	prefix := conversation + "/"
	for _, o := range objs {
		if !strings.HasPrefix(o.Name, prefix) {
			continue
		}
		if err := s.obs.Delete(ctx, o.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return bus.JetStreamErr("deleting the results of conversation "+conversation, err)
		}
	}
	return nil
}
