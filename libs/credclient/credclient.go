// Package credclient talks to the credential service (mcp.v1.cred.*): Client
// for the management verbs (set, delete, describe), Resolver for runners,
// the registry service and the chat service (ChatKey), which fetch secrets
// sealed to their own curve key.
package credclient

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Timeout bounds a request whose context has no deadline.
const Timeout = 10 * time.Second

// Client manages the secrets of servers. Replies never carry values.
type Client struct {
	nc     *nats.Conn
	subj   bus.Subjects
	sealer *Sealer
	// verbs are the subjects' last tokens of Set, Delete and Describe.
	verbs verbs
}

type verbs struct{ set, delete, describe string }

// New returns a client for the service under prefix ("" for the default).
func New(nc *nats.Conn, prefix string) *Client {
	return &Client{nc: nc, subj: bus.NewSubjects(prefix), sealer: NewSealer(nc, prefix), verbs: verbs{"set", "delete", "describe"}}
}

// The chat service's own verbs: cred.chatset, cred.chatdelete and
// cred.chatdescribe take chat profile keys only (model.CredChatProfile), so
// the chat identity, which may publish nothing else of cred.* but its key
// lookups, cannot touch a server's secrets.
const (
	VerbChatSet      = "chatset"
	VerbChatDelete   = "chatdelete"
	VerbChatDescribe = "chatdescribe"
)

// NewForChat is New for the chat service: Set, Delete and Describe go to
// its own verbs.
func NewForChat(nc *nats.Conn, prefix string) *Client {
	c := New(nc, prefix)
	c.verbs = verbs{VerbChatSet, VerbChatDelete, VerbChatDescribe}
	return c
}

// Sealer is the client's sealer (it keeps the service's key).
func (c *Client) Sealer() *Sealer { return c.sealer }

// Set merges (or with Replace, replaces) a server's secrets. The secrets
// given in req.Credentials are sealed to the service's key on the way: the
// request carries Sealed and SenderKey, never a value in clear. A request
// that is already sealed is sent as it is.
func (c *Client) Set(ctx context.Context, req model.CredSetRequest) (model.CredDescription, error) {
	if len(req.Sealed) > 0 || req.Credentials.Empty() {
		req.Credentials = model.Credentials{}
		return c.call(ctx, c.verbs.set, req)
	}
	creds := req.Credentials
	req.Credentials = model.Credentials{}
	for attempt := 0; ; attempt++ {
		sealed, sender, err := c.sealer.Seal(ctx, creds)
		if err != nil {
			return model.CredDescription{}, err
		}
		req.Sealed, req.SenderKey = sealed, sender
		out, err := c.call(ctx, c.verbs.set, req)
		if attempt == 0 && StaleKey(err) {
			c.sealer.Forget() // the service's key changed: ask again, seal again
			continue
		}
		return out, err
	}
}

// Delete removes the named secrets ("oauth" for the token), or all of them.
func (c *Client) Delete(ctx context.Context, req model.CredDeleteRequest) (model.CredDescription, error) {
	return c.call(ctx, c.verbs.delete, req)
}

// Describe says which secrets a server has.
func (c *Client) Describe(ctx context.Context, req model.CredDescribeRequest) (model.CredDescription, error) {
	return c.call(ctx, c.verbs.describe, req)
}

// VerbForget is mcp.v1.cred.<VerbForget>: delete every per-principal
// record of one principal (mcpbus up's host, revoking an agent).
const VerbForget = "forget"

// Forget deletes every per-principal record (kind principal) of principal,
// whatever server it is for.
func (c *Client) Forget(ctx context.Context, principal string) (model.CredForgetReply, error) {
	var out model.CredForgetReply
	if err := bus.RequestJSON(ctx, c.nc, c.subj.Service("cred", VerbForget), model.CredForgetRequest{Principal: principal}, &out, Timeout); err != nil {
		return model.CredForgetReply{}, unreachable(err)
	}
	return out, nil
}

func (c *Client) call(ctx context.Context, verb string, in any) (model.CredDescription, error) {
	var out model.CredDescription
	if err := bus.RequestJSON(ctx, c.nc, c.subj.Service("cred", verb), in, &out, Timeout); err != nil {
		return model.CredDescription{}, unreachable(err)
	}
	return out, nil
}

// unreachable names the credential service when nobody answers.
func unreachable(err error) error {
	if errors.Is(err, nats.ErrNoResponders) {
		return apierr.Wrap(apierr.ServiceUnavailable, "credential service not reachable", err)
	}
	return err
}

// Resolver fetches the secrets a runner needs to start a server. It owns a
// curve key pair made once: the service seals each reply to its public key,
// so the secrets cross the bus encrypted for this runner alone.
type Resolver struct {
	nc     *nats.Conn
	subj   bus.Subjects
	kp     nkeys.KeyPair
	pubKey string
	// verb is resolve (runners) or registry (the registry service's key).
	verb   string
	runner string
	signer nkeys.KeyPair // nil: no proof (a runner without a bus identity)
}

// ResolverOption sets who resolves.
type ResolverOption func(*Resolver)

// AsRunner resolves as runner id: the service answers only for servers that
// runner owns.
func AsRunner(id string) ResolverOption { return func(r *Resolver) { r.runner = id } }

// SignedBy proves each resolve with the runner's bus identity (its nkey),
// which its leases name: a resolve in the runner's name signed by any other
// key is refused.
func SignedBy(kp nkeys.KeyPair) ResolverOption { return func(r *Resolver) { r.signer = kp } }

// ForRegistry resolves the registry credentials (the Smithery key) on
// mcp.v1.cred.registry, the registry service's own subject.
func ForRegistry() ResolverOption { return func(r *Resolver) { r.verb = "registry" } }

// NewResolver creates the resolver and its key pair.
func NewResolver(nc *nats.Conn, prefix string, opts ...ResolverOption) (*Resolver, error) {
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		return nil, fmt.Errorf("credclient: creating a curve key pair: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("credclient: curve public key: %w", err)
	}
	r := &Resolver{nc: nc, subj: bus.NewSubjects(prefix), kp: kp, pubKey: pub, verb: "resolve"}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// PublicKey is the key replies are sealed to.
func (r *Resolver) PublicKey() string { return r.pubKey }

// Resolve returns the credentials of the server with config id serverID
// (empty when it has none).
func (r *Resolver) Resolve(ctx context.Context, serverID string) (model.ResolvedCredentials, error) {
	return r.ResolveFor(ctx, serverID, "")
}

// ResolveFor returns principal's own credentials for the server with config
// id serverID (a server with auth.per_principal); with principal "" it is
// Resolve. None stored is an empty answer.
func (r *Resolver) ResolveFor(ctx context.Context, serverID, principal string) (model.ResolvedCredentials, error) {
	req := model.CredResolveRequest{ServerID: serverID, RecipientKey: r.pubKey, Runner: r.runner, Principal: principal}
	if r.signer != nil {
		pub, err := r.signer.PublicKey()
		if err != nil {
			return model.ResolvedCredentials{}, fmt.Errorf("credclient: the runner's public key: %w", err)
		}
		req.RunnerKey, req.SignedAt = pub, time.Now().UnixMilli()
		sig, err := r.signer.Sign(req.ProofMessage())
		if err != nil {
			return model.ResolvedCredentials{}, fmt.Errorf("credclient: signing the resolve: %w", err)
		}
		req.Signature = base64.RawURLEncoding.EncodeToString(sig)
	}
	return r.fetch(ctx, r.verb, req)
}

// VerbChatKey is mcp.v1.cred.<VerbChatKey>: the API key of a chat profile,
// for the chat service alone.
const VerbChatKey = "chatkey"

// ChatKeyRequest is the body of mcp.v1.cred.chatkey. The service derives the
// credential id from Profile (model.ChatProfileCredentialID): no other record
// can be named. The reply (model.SealedReply) is sealed to RecipientKey and
// opens to model.ResolvedCredentials holding model.ChatAPIKeyEnv alone.
type ChatKeyRequest struct {
	Profile      string `json:"profile"`
	RecipientKey string `json:"recipient_key"`
}

// ChatKey returns the API key of the chat profile named profile, asked on
// mcp.v1.cred.chatkey (the chat service's own subject, whatever the
// resolver's options) and sealed to this resolver's key on the way. A
// profile with no stored key is NOT_FOUND.
func (r *Resolver) ChatKey(ctx context.Context, profile string) (string, error) {
	out, err := r.fetch(ctx, VerbChatKey, ChatKeyRequest{Profile: profile, RecipientKey: r.pubKey})
	if err != nil {
		return "", err
	}
	key := out.Env[model.ChatAPIKeyEnv]
	if key == "" {
		return "", apierr.Newf(apierr.NotFound, "no API key is stored for chat profile %s", profile)
	}
	return key, nil
}

// VerbOAuthClient is mcp.v1.cred.<VerbOAuthClient>: the client secret of a
// server's confidential OAuth client and the client the gateway registered
// dynamically, for the gateway alone.
const VerbOAuthClient = "oauthclient"

// OAuthClientRequest is the body of mcp.v1.cred.oauthclient. The service
// derives the record from ServerID (model.OAuthClientCredentialID): no other
// record can be named. The reply (model.SealedReply) is sealed to
// RecipientKey and opens to model.ResolvedCredentials holding
// model.OAuthClientSecretName and model.OAuthRegisteredClientName alone
// (those stored).
type OAuthClientRequest struct {
	ServerID     string `json:"server_id"`
	RecipientKey string `json:"recipient_key"`
}

// OAuthClientSecret returns the client secret stored for the OAuth client
// of the server with config id serverID, asked on mcp.v1.cred.oauthclient
// and sealed to this resolver's key on the way. None stored is NOT_FOUND.
func (r *Resolver) OAuthClientSecret(ctx context.Context, serverID string) (string, error) {
	out, err := r.fetch(ctx, VerbOAuthClient, OAuthClientRequest{ServerID: serverID, RecipientKey: r.pubKey})
	if err != nil {
		return "", err
	}
	secret := out.Env[model.OAuthClientSecretName]
	if secret == "" {
		return "", apierr.New(apierr.NotFound, "no OAuth client secret is stored for this server")
	}
	return secret, nil
}

// OAuthRegisteredClient returns the client the gateway registered
// dynamically at the authorization server of the server with config id
// serverID (model.OAuthRegisteredClientName), asked on
// mcp.v1.cred.oauthclient like OAuthClientSecret. None kept (or one that
// does not decode whole) is NOT_FOUND.
func (r *Resolver) OAuthRegisteredClient(ctx context.Context, serverID string) (model.OAuthRegisteredClient, error) {
	out, err := r.fetch(ctx, VerbOAuthClient, OAuthClientRequest{ServerID: serverID, RecipientKey: r.pubKey})
	if err != nil {
		return model.OAuthRegisteredClient{}, err
	}
	raw := out.Env[model.OAuthRegisteredClientName]
	if raw == "" {
		return model.OAuthRegisteredClient{}, apierr.New(apierr.NotFound, "no registered OAuth client is kept for this server")
	}
	var c model.OAuthRegisteredClient
	if err := json.Unmarshal([]byte(raw), &c); err != nil || c.ClientID == "" || c.Issuer == "" || c.RedirectURI == "" {
		// Unusable is as good as none: the gateway registers a new one over it.
		return model.OAuthRegisteredClient{}, apierr.New(apierr.NotFound, "the registered OAuth client kept for this server is unusable")
	}
	return c, nil
}

// fetch sends req on mcp.v1.cred.<verb> and opens the sealed reply with the
// resolver's key.
func (r *Resolver) fetch(ctx context.Context, verb string, req any) (model.ResolvedCredentials, error) {
	plain, err := r.open(ctx, verb, req)
	if err != nil {
		return model.ResolvedCredentials{}, err
	}
	defer clear(plain)
	var out model.ResolvedCredentials
	if err := json.Unmarshal(plain, &out); err != nil {
		return model.ResolvedCredentials{}, apierr.Wrap(apierr.Internal, "the credential reply is malformed", err)
	}
	return out, nil
}

// open sends req on mcp.v1.cred.<verb> and returns the sealed reply opened
// with the resolver's key (the caller clears it).
func (r *Resolver) open(ctx context.Context, verb string, req any) ([]byte, error) {
	var reply model.SealedReply
	if err := bus.RequestJSON(ctx, r.nc, r.subj.Service("cred", verb), req, &reply, Timeout); err != nil {
		return nil, unreachable(err)
	}
	plain, err := r.kp.Open(reply.Sealed, reply.SenderKey)
	if err != nil {
		return nil, apierr.Wrap(apierr.Internal, "the credential reply cannot be opened with this resolver's key", err)
	}
	return plain, nil
}

// VerbFingerprints is mcp.v1.cred.<VerbFingerprints>: the fingerprints of
// every stored secret value, for runners alone.
const VerbFingerprints = "fingerprints"

// Fingerprints returns the credential service's fingerprint feed, sealed to
// this resolver's key on the way: keyed fingerprints of every stored value,
// never a value (model.FingerprintFeed).
func (r *Resolver) Fingerprints(ctx context.Context) (model.FingerprintFeed, error) {
	plain, err := r.open(ctx, VerbFingerprints, model.CredFingerprintsRequest{RecipientKey: r.pubKey, Runner: r.runner})
	if err != nil {
		return model.FingerprintFeed{}, err
	}
	defer clear(plain)
	var out model.FingerprintFeed
	if err := json.Unmarshal(plain, &out); err != nil {
		return model.FingerprintFeed{}, apierr.Wrap(apierr.Internal, "the fingerprint feed is malformed", err)
	}
	return out, nil
}
