package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Defaults of the durable tasks (Options.Task*).
const (
	DefaultTaskRetention = 24 * time.Hour
	DefaultTaskTimeout   = time.Hour
	DefaultTaskAckWait   = 15 * time.Second
)

// maxTaskRecord bounds a task record, result included: results live in the
// KV bucket itself (not an object store), so one is at most this big (and
// at most one bus message: taskStore.maxRecord); a larger result fails its
// task with a message saying so.
const maxTaskRecord = 4 << 20

// DefaultTaskMaxBytes bounds KV mcp_tasks (Options.TaskMaxBytes), every
// principal's tasks together. nats-server refuses every write, to any
// stream, once the storage used passes its max (a stream's reservation
// does not keep its room), so an unbounded bucket of results (1000 tasks
// a principal, 4 MiB each) let callers stop the audit, the events, the
// lease renewals and the config writes of everyone; bounded, a full bucket
// refuses tasks only (errTaskStoreFull).
const DefaultTaskMaxBytes = 1 << 30

// taskStore is the tasks' JetStream assets: the work queue of runs (one
// message per run asked, consumed by the server's owner) and the records.
type taskStore struct {
	kv        jetstream.KeyValue
	stream    jetstream.Stream
	retention time.Duration
	// maxRecord is the largest record written: maxTaskRecord, or less on a
	// bus whose max_payload is smaller (nats-server's default is 1 MiB),
	// where a larger write is refused and the run's outcome was lost.
	maxRecord int
}

// openTasks creates or binds the tasks' stream and bucket. The bucket's TTL
// is the retention: a record is gone that long after its last write (a
// working task's runner rewrites it while it runs).
func (r *Runner) openTasks(ctx context.Context) error {
	ret := r.opts.TaskRetention
	kv, err := bus.EnsureKV(ctx, r.js, jetstream.KeyValueConfig{
		Bucket: bus.BucketTasks, Description: "mcpbus durable tasks: state and result by task id",
		History: 1, TTL: ret, MaxValueSize: maxTaskRecord, MaxBytes: r.opts.TaskMaxBytes, Storage: jetstream.FileStorage,
	}, r.opts.Replicas, r.log)
	if err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	st, err := bus.EnsureStream(ctx, r.js, jetstream.StreamConfig{
		Name: bus.StreamTasks, Description: "mcpbus durable tasks: runs waiting for or held by a server's owner",
		Subjects: []string{r.subj.TaskRuns()}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, MaxAge: ret, Discard: jetstream.DiscardOld,
	}, r.opts.Replicas, r.log)
	if err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	maxRecord := min(maxTaskRecord, int(r.nc.MaxPayload())-replyHeadroom)
	r.tasks = &taskStore{kv: bus.RetryKV(kv), stream: st, retention: ret, maxRecord: maxRecord}
	return nil
}

// taskRecord is what the bucket holds: the task, and while it works what
// its run needs (the arguments and the caller's principal header), never
// shown. A final task drops those (updateRecord): the arguments may hold
// what the secret scan blocked or redacted, and the record is kept for the
// retention, readable by runners and operators.
type taskRecord struct {
	model.Task
	Args            json.RawMessage `json:"args,omitempty"`
	PrincipalHeader string          `json:"principal_header,omitempty"`
	// ClaimedAt is when the last run started: a run that stopped with its
	// runner and that no owner takes up again ends failed from it
	// (taskexpire.go).
	ClaimedAt time.Time `json:"claimed_at,omitzero"`
}

// errTaskGone is a record that does not exist (never, or past retention).
var errTaskGone = errors.New("task not found")

// getRecord reads a task and its revision.
func (t *taskStore) getRecord(ctx context.Context, id string) (taskRecord, uint64, error) {
	var rec taskRecord
	e, err := t.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return rec, 0, errTaskGone
	}
	if err != nil {
		return rec, 0, apierr.Wrap(apierr.ServiceUnavailable, "reading the task", err)
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return rec, 0, apierr.Wrap(apierr.Internal, "decoding the task", err)
	}
	return rec, e.Revision(), nil
}

// updateRecord applies change to the stored task by compare-and-set, again
// on a conflict; change returns false to leave it as it is. The record as
// stored last is returned.
func (t *taskStore) updateRecord(ctx context.Context, id string, change func(*taskRecord) bool) (taskRecord, error) {
	for range 20 {
		rec, rev, err := t.getRecord(ctx, id)
		if err != nil {
			return rec, err
		}
		if !change(&rec) {
			return rec, nil
		}
		if model.TaskFinal(rec.State) {
			// Only a run reads them, and a final task is never run
			// (runTask finds it final and acks its message).
			rec.Args, rec.PrincipalHeader = nil, ""
		}
		rec.UpdatedAt = time.Now().UTC()
		data, err := json.Marshal(rec)
		if err != nil {
			return rec, apierr.Wrap(apierr.Internal, "encoding the task", err)
		}
		if len(data) > t.maxRecord {
			return rec, errTaskTooLarge
		}
		_, err = t.kv.Update(ctx, id, data, rev)
		if err == nil {
			if model.TaskFinal(rec.State) {
				// The owner entry lives as long as the record from here: a
				// principal's list (task.list) reads its tasks by their
				// owner entries, written with the task.
				_, _ = t.kv.Put(ctx, ownerKeys(rec.Principal)+id, []byte("1"))
			}
			return rec, nil
		}
		if bus.StoreFull(err) {
			return rec, errTaskStoreFull
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return rec, apierr.Wrap(apierr.ServiceUnavailable, "writing the task", err)
		}
	}
	return taskRecord{}, apierr.New(apierr.Conflict, "the task changed too often to update it")
}

// errTaskTooLarge: the record with its result does not fit the bucket (or
// the bus); tooLarge is what the task says then.
var errTaskTooLarge = errors.New("the task record is too large")

// tooLarge is the failure of a task whose result does not fit its record.
func (t *taskStore) tooLarge() error {
	return apierr.Newf(apierr.Validation, "the result is larger than a task record may be (%d bytes)", t.maxRecord)
}

// errTaskStoreFull: the bucket holds its bound (Options.TaskMaxBytes), or
// the NATS server has no storage left; a smaller write may still pass (it
// replaces the record), a larger one not until tasks expire.
var errTaskStoreFull = errors.New("the task store is full")

// storeFull is what a task, or its creation, says when the bucket is full.
func storeFull(what string) error {
	return apierr.Newf(apierr.ServiceUnavailable, "the task store is full (KV %s holds every principal's tasks up to its bound): %s; "+
		"room comes back as tasks expire (the task retention)", bus.BucketTasks, what)
}
