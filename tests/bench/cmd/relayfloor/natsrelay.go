package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"
)

// natsRelay is -nats: a tool call goes to a runner as one NATS request (the
// tool's arguments as its body, on callPrefix+<tool>), the floor of any
// HTTP edge in front of mcpbus's NATS path, with nothing of mcpbus in it.
// Besides /mcp it serves POST /invoke/<tool>, the plain HTTP form: the
// arguments as the body, the runner's reply as the answer.
type natsRelay struct {
	nc         *nats.Conn
	callPrefix string
}

func startNATSRelay(url, seed, inboxPrefix, callPrefix string) (*natsRelay, error) {
	opts := []nats.Option{nats.Name("relayfloor")}
	if seed != "" {
		opt, err := nats.NkeyOptionFromSeed(seed)
		if err != nil {
			return nil, fmt.Errorf("nkey: %w", err)
		}
		opts = append(opts, opt)
	}
	if inboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(inboxPrefix))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	return &natsRelay{nc: nc, callPrefix: callPrefix}, nil
}

// errorHeader is the header of a NATS micro error reply, as a runner's is.
const errorHeader = "Nats-Service-Error-Code"

// call sends one tool call and returns the runner's reply bytes.
func (r *natsRelay) call(ctx context.Context, tool string, args []byte) ([]byte, error) {
	msg, err := r.nc.RequestWithContext(ctx, r.callPrefix+tool, args)
	if err != nil {
		return nil, err
	}
	if code := msg.Header.Get(errorHeader); code != "" {
		return nil, fmt.Errorf("error %s: %s", code, msg.Data)
	}
	return msg.Data, nil
}

// invoke serves POST /invoke/<tool>.
func (r *natsRelay) invoke(w http.ResponseWriter, req *http.Request) {
	args, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := r.call(req.Context(), strings.TrimPrefix(req.URL.Path, "/invoke/"), args)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func (r *natsRelay) close() { r.nc.Close() }
