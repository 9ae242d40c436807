package credential

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/telemetry/conv"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

// meterName is the instrumentation scope of the credential service's metrics.
const meterName = "github.com/mcpbus/mcpbus/services/credential"

// metrics are the credential service's own instruments: answers to the
// resolve subjects by outcome, and the backend's latency and reachability.
type metrics struct {
	resolves metric.Int64Counter
}

func newMetrics() metrics {
	resolves, _ := otel.Meter(meterName).Int64Counter("mcpbus.credential.resolves", metric.WithUnit("{request}"),
		metric.WithDescription("Answers of cred.resolve, cred.registry, cred.chatkey and cred.oauthclient by via and outcome (resolved, or the refusal's contract code)"))
	return metrics{resolves: resolves}
}

// resolved counts one answer on via.
func (m metrics) resolved(via string, err error) {
	outcome := "resolved"
	if err != nil {
		outcome = string(apierr.Of(err))
	}
	m.resolves.Add(context.Background(), 1, metric.WithAttributes(attribute.String("via", via), attribute.String("outcome", outcome)))
}

// measuredStore times every backend operation
// (mcpbus.credential.backend.duration) and keeps whether the last one
// reached the backend (mcpbus.credential.backend.up: 0 after an
// unreachable, sealed or refusing backend, 1 after any answer).
type measuredStore struct {
	store.Store
	duration metric.Float64Histogram
	up       *atomic.Int64
}

func measure(st store.Store) measuredStore {
	m := otel.Meter(meterName)
	d, _ := m.Float64Histogram("mcpbus.credential.backend.duration", metric.WithUnit("s"),
		metric.WithDescription("Operations on the credential backend (file, vault) by operation (get, put, delete, list); error.type on failure"))
	up := &atomic.Int64{}
	up.Store(-1) // not known before the first operation
	backend := attribute.String("backend", st.Name())
	_, _ = m.Int64ObservableGauge("mcpbus.credential.backend.up",
		metric.WithDescription("1 when the last operation on the credential backend reached it, 0 when it was unreachable, sealed or refused the service's credentials"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			if v := up.Load(); v >= 0 {
				o.Observe(v, metric.WithAttributes(backend))
			}
			return nil
		}))
	return measuredStore{Store: st, duration: d, up: up}
}

// done records one operation.
func (m measuredStore) done(op string, start time.Time, err error) {
	attrs := []attribute.KeyValue{attribute.String("backend", m.Name()), attribute.String("operation", op)}
	reached := int64(1)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		code := apierr.Of(err)
		attrs = append(attrs, conv.ErrorType.String(string(code)))
		if code == apierr.ServiceUnavailable || code == apierr.Unauthorized {
			reached = 0
		}
	}
	m.up.Store(reached)
	m.duration.Record(context.Background(), time.Since(start).Seconds(), metric.WithAttributes(attrs...))
}

func (m measuredStore) Get(ctx context.Context, key string) (model.Credentials, time.Time, error) {
	start := time.Now()
	c, at, err := m.Store.Get(ctx, key)
	m.done("get", start, err)
	return c, at, err
}

func (m measuredStore) Put(ctx context.Context, key string, c model.Credentials) error {
	start := time.Now()
	err := m.Store.Put(ctx, key, c)
	m.done("put", start, err)
	return err
}

func (m measuredStore) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := m.Store.Delete(ctx, key)
	m.done("delete", start, err)
	return err
}

// List lists the store's record keys, when it can (store.Lister).
func (m measuredStore) List(ctx context.Context) ([]string, error) {
	l, ok := m.Store.(store.Lister)
	if !ok {
		return nil, apierr.Newf(apierr.Internal, "the %s credential store cannot list its records", m.Name())
	}
	start := time.Now()
	keys, err := l.List(ctx)
	m.done("list", start, err)
	return keys, err
}

// GetVersion is Get with the record's version (the store must be
// store.Versioned: Service.update checks).
func (m measuredStore) GetVersion(ctx context.Context, key string) (model.Credentials, time.Time, uint64, error) {
	start := time.Now()
	c, at, v, err := m.Store.(store.Versioned).GetVersion(ctx, key)
	m.done("get", start, err)
	return c, at, v, err
}

// PutIf is Put at a version (store.Versioned).
func (m measuredStore) PutIf(ctx context.Context, key string, c model.Credentials, version uint64) error {
	start := time.Now()
	err := m.Store.(store.Versioned).PutIf(ctx, key, c, version)
	if errors.Is(err, store.ErrChanged) {
		m.done("put", start, nil) // Vault answered
	} else {
		m.done("put", start, err)
	}
	return err
}

// versioned reports whether the store checks versions (store.Versioned).
func (m measuredStore) versioned() bool {
	_, ok := m.Store.(store.Versioned)
	return ok
}
