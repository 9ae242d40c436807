package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// records is the durable trail of -js: an embedded nats-server with
// JetStream in dir and two file streams of 1 GiB, as mcpbus keeps its call
// events and its audit records, each given one record of every call. It is
// the memory floor of a design that keeps a durable record of each call,
// with nothing else of mcpbus's.
type records struct {
	ns *server.Server
	nc *nats.Conn
	js jetstream.JetStream
}

// recordStreams are the two streams and their subjects.
var recordStreams = []string{"EVENTS", "AUDIT"}

func startRecords(ctx context.Context, dir string) (*records, error) {
	ns, err := server.NewServer(&server.Options{DontListen: true, NoLog: true, NoSigs: true, JetStream: true, StoreDir: dir})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("nats server did not start")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		ns.Shutdown()
		return nil, err
	}
	for _, name := range recordStreams {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"},
			Storage: jetstream.FileStorage, MaxBytes: 1 << 30, MaxAge: 7 * 24 * time.Hour}); err != nil {
			nc.Close()
			ns.Shutdown()
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
	}
	return &records{ns: ns, nc: nc, js: js}, nil
}

// callRecord is what each stream gets of a call: about the size of an
// mcpbus call event.
type callRecord struct {
	Tool       string    `json:"tool"`
	Outcome    string    `json:"outcome"`
	DurationMS float64   `json:"duration_ms"`
	At         time.Time `json:"at"`
	RequestID  int64     `json:"request_id"`
	Principal  string    `json:"principal"`
}

// record publishes one record of a call to each stream, without waiting for
// the acknowledgements.
func (r *records) record(tool string, id int64, start time.Time, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	data, _ := json.Marshal(callRecord{Tool: tool, Outcome: outcome, DurationMS: float64(time.Since(start).Microseconds()) / 1000,
		At: start.UTC(), RequestID: id, Principal: "key:relayfloor"})
	for _, name := range recordStreams {
		_, _ = r.js.PublishAsync(name+".call", data)
	}
}

func (r *records) close() {
	r.nc.Close()
	r.ns.Shutdown()
}
