// Package gwaudit is the gateway's audit trail: what someone changes
// through the gateway (keys, token revocations, authorization flows,
// approval decisions) is published on events.gateway.<action> and, with
// the gateway's OAuth outcomes, appended to its signed audit chain
// (libs/audit) under the gateway's own identity.
package gwaudit

import (
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/audit"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Recorder publishes and chains the gateway's audited events. A nil
// Recorder does nothing (tests of single parts); a Recorder without a
// writer (a bus without identities) publishes without chaining.
type Recorder struct {
	nc   *nats.Conn
	subj bus.Subjects
	w    *audit.Writer
	log  *slog.Logger
}

// New records on nc under prefix, chaining with w (nil: not chained).
func New(nc *nats.Conn, prefix string, w *audit.Writer, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{nc: nc, subj: bus.NewSubjects(prefix), w: w, log: log}
}

// Record publishes ev on events.gateway.<action> and appends it to the
// chain; it never blocks on the bus (a core publish, a queued append).
func (r *Recorder) Record(ev model.GatewayAuditEvent) {
	if r == nil {
		return
	}
	if ev.At.IsZero() {
		ev.At = time.Now().UTC()
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	subject := r.subj.Event("gateway", ev.Action)
	r.w.Append(subject, data)
	if err := r.nc.Publish(subject, data); err != nil {
		r.log.Warn("publishing a gateway audit event failed", "action", ev.Action, "error", err)
	}
}

// Chain appends an event published elsewhere (events.oauth.<server>).
func (r *Recorder) Chain(subject string, data []byte) {
	if r != nil {
		r.w.Append(subject, data)
	}
}

// Close writes what is queued (for at most timeout) and stops the writer.
func (r *Recorder) Close(timeout time.Duration) {
	if r != nil {
		r.w.Close(timeout)
	}
}
