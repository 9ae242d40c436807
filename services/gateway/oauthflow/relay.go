package oauthflow

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
)

// A flow lives in the gateway instance that started it (go-sdk's handler
// holds the PKCE verifier), but the browser's callback may reach any
// instance behind a load balancer. So the holder publishes the flow in KV
// mcp_oauth_flows under the SHA-256 of its state, with a curve key made
// for this flow alone, and takes callbacks on mcp.v1.oauth.callback.<id>;
// whichever instance serves GET /oauth/callback looks the state up and
// sends the query there sealed to that key (it holds the authorization
// code, which must not cross the bus in clear), then shows the outcome the
// holder answers.

// flowsTTL clears the entries of a gateway that died mid-flow; a live one
// deletes its entry when the flow ends. Longer than any flow's timeout.
const flowsTTL = 15 * time.Minute

// relayTimeout bounds one KV read or the forwarding of a callback, the
// token exchange it waits for aside.
const relayTimeout = 5 * time.Second

// errUnknown is a callback whose state names no flow under way.
var errUnknown = apierr.New(apierr.Validation, "This authorization is unknown, already used or expired. Run `mcpbus servers auth <server>` again.").WithField("state")

// openFlows creates (or updates) the bucket of pending flows.
func openFlows(ctx context.Context, nc *nats.Conn, opts Options) (jetstream.KeyValue, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("oauthflow: jetstream: %w", err)
	}
	kv, err := bus.EnsureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      bus.BucketOAuthFlows,
		Description: "OAuth flows waiting for their callback, by SHA-256 of the state: server, the flow's curve public key, expiry (gateway)",
		History:     1,
		TTL:         flowsTTL,
		Storage:     jetstream.MemoryStorage,
	}, opts.Replicas, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("oauthflow: %w", err)
	}
	return kv, nil
}

// flowID is the key of a state in the bucket and the last token of its
// callback subject: the state itself never goes to the bucket.
func flowID(state string) string {
	sum := sha256.Sum256([]byte(state))
	return hex.EncodeToString(sum[:])
}

// listen publishes the flow of state and takes its callback: the first
// one that opens with the flow's key goes to got, and its sender gets the
// flow's outcome as the reply. stop ends listening and drops the entry.
func (f *Flows) listen(ctx context.Context, fl *flow, state string, expires time.Time, got chan<- model.OAuthCallback) (stop func(), err error) {
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		return nil, fmt.Errorf("creating the flow's curve key: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		kp.Wipe()
		return nil, fmt.Errorf("the flow's curve public key: %w", err)
	}
	id := flowID(state)
	var used atomic.Bool
	sub, err := f.nc.Subscribe(f.subj.OAuthCallback(id), func(m *nats.Msg) {
		if !bus.InboxMsg(nil, m) {
			return
		}
		cb, err := openCallback(kp, m.Data, state)
		switch {
		case err != nil:
			err = apierr.Wrap(apierr.Validation, "the callback could not be opened with the flow's key", err)
		case cb.Continue:
			u, cerr := fl.continued(cb)
			f.reply(m, model.OAuthCallbackReply{Server: fl.server, AuthorizationURL: u}, cerr)
			return
		case !fl.bound(cb.Cookie):
			err = errUnbound // not the flow's end: its starter may still come back
		case !used.CompareAndSwap(false, true):
			err = errUnknown
		default:
			got <- cb // buffered for the one callback that gets here
			err = f.outcome(fl)
		}
		f.reply(m, model.OAuthCallbackReply{Server: fl.server}, err)
	})
	if err != nil {
		kp.Wipe()
		return nil, fmt.Errorf("subscribing to the flow's callback: %w", err)
	}
	entry, err := json.Marshal(model.OAuthFlow{Server: fl.server, Key: pub, ExpiresAt: expires})
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, relayTimeout)
		_, err = f.kv.Put(pctx, id, entry)
		cancel()
	}
	stop = func() {
		_ = sub.Unsubscribe()
		dctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
		defer cancel()
		if err := f.kv.Delete(dctx, id); err != nil {
			f.log.Debug("dropping a finished OAuth flow from the bucket", "server", fl.server, "error", err)
		}
		kp.Wipe()
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("publishing the flow in %s: %w", bus.BucketOAuthFlows, err)
	}
	return stop, nil
}

// outcome waits for the flow's end (the token exchange and storing the
// tokens), at most callbackWait.
func (f *Flows) outcome(fl *flow) error {
	select {
	case err := <-fl.outcome:
		return err
	case <-time.After(callbackWait):
		return apierr.New(apierr.Network, "mcpbus is still finishing the authorization; see `mcpbus status`")
	}
}

func (f *Flows) reply(m *nats.Msg, out model.OAuthCallbackReply, err error) {
	var rerr error
	if err != nil {
		rerr = m.RespondMsg(bus.ErrorMsg(err))
	} else {
		data, _ := json.Marshal(out)
		rerr = m.Respond(data)
	}
	if rerr != nil {
		f.log.Warn("answering an OAuth callback relayed from another gateway", "server", out.Server, "error", rerr)
	}
}

// openCallback opens a relayed callback with the flow's key and checks it
// is for this flow's state.
func openCallback(kp nkeys.KeyPair, data []byte, state string) (model.OAuthCallback, error) {
	var in model.OAuthCallbackRequest
	if err := json.Unmarshal(data, &in); err != nil {
		return model.OAuthCallback{}, fmt.Errorf("decoding: %w", err)
	}
	if !nkeys.IsValidPublicCurveKey(in.SenderKey) || len(in.Sealed) == 0 || len(in.Sealed) > credclient.MaxSealed {
		return model.OAuthCallback{}, errors.New("sealed or sender_key missing or malformed")
	}
	plain, err := kp.Open(in.Sealed, in.SenderKey)
	if err != nil {
		return model.OAuthCallback{}, err
	}
	defer clear(plain)
	var cb model.OAuthCallback
	if err := json.Unmarshal(plain, &cb); err != nil || (cb.State != state && !(cb.Continue && cb.State == "")) {
		return model.OAuthCallback{}, errors.New("the sealed callback is not for this flow")
	}
	return cb, nil
}

// relay passes a callback to the instance holding its flow and returns
// the server authorized, or why not.
func (f *Flows) relay(ctx context.Context, cb model.OAuthCallback) (string, error) {
	out, _, err := f.relayTo(ctx, flowID(cb.State), "", cb)
	return out.Server, err
}

// relayTo sends cb, sealed, to the instance holding flow id (of server,
// when not ""), and returns its answer and the flow's entry.
func (f *Flows) relayTo(ctx context.Context, id, server string, cb model.OAuthCallback) (model.OAuthCallbackReply, model.OAuthFlow, error) {
	var out model.OAuthCallbackReply
	var fl model.OAuthFlow
	gctx, cancel := context.WithTimeout(ctx, relayTimeout)
	e, err := f.kv.Get(gctx, id)
	cancel()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return out, fl, errUnknown
	}
	if err != nil {
		return out, fl, bus.JetStreamErr("reading the OAuth flow", err)
	}
	if err := json.Unmarshal(e.Value(), &fl); err != nil || time.Now().After(fl.ExpiresAt) {
		return out, fl, errUnknown
	}
	if server != "" && fl.Server != server {
		return out, fl, apierr.Invalid("flow", "this authorization is for "+fl.Server+", not "+server)
	}
	plain, err := json.Marshal(cb)
	if err != nil {
		return out, fl, apierr.Wrap(apierr.Internal, "encoding the callback", err)
	}
	defer clear(plain)
	sealed, sender, err := credclient.SealBytes(plain, fl.Key)
	if err != nil {
		return out, fl, err
	}
	rctx, cancel := context.WithTimeout(ctx, callbackWait+relayTimeout)
	defer cancel()
	err = bus.RequestJSON(rctx, f.nc, f.subj.OAuthCallback(id), model.OAuthCallbackRequest{Sealed: sealed, SenderKey: sender}, &out, 0)
	if errors.Is(err, nats.ErrNoResponders) {
		return out, fl, errUnknown // the flow ended (or its gateway stopped) since
	}
	return out, fl, err
}
