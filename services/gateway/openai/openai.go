// Package openai is the gateway's OpenAI-compatible front door to the chat
// service: POST /v1/chat/completions runs one turn of a new conversation
// (model = a chat profile) and answers with its final text, streamed or not;
// GET /v1/models lists the profiles and GET /v1/models/{model} gives one. Tool calls run inside mcpbus, like a
// server-side agent: the client sees only the answer. Each request is its own
// conversation (oai-<uuid>), kept in the conversation log like any other.
package openai

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/client"
	"github.com/mcpbus/mcpbus/libs/model"
)

// requestTimeout bounds one request to the chat service (a send only
// starts the turn).
const requestTimeout = 15 * time.Second

// Defaults of Options. DefaultTurnTimeout is under the OpenAI SDKs' default
// timeout (10 minutes; the JavaScript SDK does not announce it) by
// clientMargin, so a completion's 504, which says not to retry, reaches the
// client before it gives up and sends the turn again.
const (
	DefaultTurnTimeout = 10*time.Minute - clientMargin
	DefaultHeartbeat   = 15 * time.Second
)

// Options configure the endpoints; zero values take the defaults.
type Options struct {
	Prefix string
	Logger *slog.Logger
	// TurnTimeout bounds one completion: the turn is cancelled past it
	// (default 9m55s).
	TurnTimeout time.Duration
	// Heartbeat is the interval of the keep-alive comments of a streamed
	// completion while the model or a tool works (default 15s).
	Heartbeat time.Duration
}

// API serves /v1/chat/completions and /v1/models.
type API struct {
	chat *client.Client
	opts Options
	log  *slog.Logger
	open tracker
}

// New returns the endpoints on nc.
func New(nc *nats.Conn, opts Options) *API {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.TurnTimeout <= 0 {
		opts.TurnTimeout = DefaultTurnTimeout
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	return &API{chat: client.New(nc, client.Options{Prefix: opts.Prefix, Timeout: requestTimeout}), opts: opts, log: opts.Logger}
}

// DropKey ends the running completions of an API key (its turns are
// cancelled): called when the key is revoked.
func (a *API) DropKey(keyID string) { a.open.drop(keyID) }

// Stop ends every running completion and refuses new ones (shutdown: a
// graceful stop would otherwise wait for their turns).
func (a *API) Stop() { a.open.stop() }

// Route is one endpoint.
type Route struct {
	Method  string
	Pattern string
	Handler http.HandlerFunc
}

// Routes lists the endpoints.
func (a *API) Routes() []Route {
	return []Route{
		{"POST", "/v1/chat/completions", a.completions},
		{"GET", "/v1/models", a.models},
		{"GET", "/v1/models/{model}", a.model},
	}
}

// Model is one entry of GET /v1/models: a chat profile.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

func (a *API) models(w http.ResponseWriter, r *http.Request) {
	profiles, err := a.chat.ListProfiles(r.Context())
	if err != nil {
		writeError(w, fromBus(err))
		return
	}
	list := ModelList{Object: "list", Data: make([]Model, 0, len(profiles))}
	for _, p := range profiles {
		list.Data = append(list.Data, modelOf(p))
	}
	writeJSON(w, http.StatusOK, list)
}

// model is GET /v1/models/{model} (openai's models.retrieve): the entry
// /v1/models lists for that profile.
func (a *API) model(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	if !model.ValidSlug(name) {
		writeError(w, modelNotFound(name))
		return
	}
	p, err := a.chat.GetProfile(r.Context(), name)
	if err != nil {
		if apierr.Of(err) == apierr.NotFound {
			writeError(w, modelNotFound(name))
			return
		}
		writeError(w, fromBus(err))
		return
	}
	writeJSON(w, http.StatusOK, modelOf(p))
}

// modelOf is the model entry of a profile.
func modelOf(p model.Profile) Model {
	m := Model{ID: p.Name, Object: "model", OwnedBy: "mcpbus"}
	if !p.CreatedAt.IsZero() {
		m.Created = p.CreatedAt.Unix()
	}
	return m
}
