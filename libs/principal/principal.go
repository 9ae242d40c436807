// Package principal is who a request on the bus acts for: the one who
// authenticated at the edge (an API key, an OAuth subject), an agent, or the
// operator. The gateway puts it in the context of each request it handles;
// bus.PrepareHeaders carries it in the Mcpbus-Principal header of every bus
// request made with that context, and services read it back with FromHeader.
//
// The header is trusted because of who may publish where, not because of a
// signature: only the gateway, the chat service and the operator may send
// requests on the subjects that read it (libs/access), the gateway always
// sets it from the authenticated key or token (an HTTP client never writes
// a bus header), and a request without one comes from the operator, who
// holds the whole bus anyway. Agents are named by their subject instead.
package principal

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// Header carries the principal on a bus request: base64url of its JSON.
const Header = "Mcpbus-Principal"

// Kinds of principal.
const (
	KindKey      = "key"
	KindOAuth    = "oauth"
	KindAgent    = "agent"
	KindOperator = "operator"
)

// maxHeader bounds the encoded header (a tool filter of many globs fits).
const maxHeader = 16 << 10

// Principal is who a request acts for. It holds no secret: ID names a key
// by its id, never by its value.
type Principal struct {
	// ID is stable per principal: key:<key id>, oauth:<issuer>#<subject>,
	// agent:<name> or operator. It is what owns conversations and what
	// audit events and spans (enduser.id) name.
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Admin: the key or token has the admin scope (the operator is admin).
	Admin bool `json:"admin,omitempty"`
	// Tools is the caller's own tool filter (key filter, token scopes,
	// agent allow list); nil allows every tool.
	Tools *model.ToolFilter `json:"tools,omitempty"`
}

// Operator is the principal of a bus request without the header.
func Operator() Principal { return Principal{ID: KindOperator, Kind: KindOperator, Admin: true} }

// Key is the principal of an API key.
func Key(id string, admin bool, tools model.ToolFilter) Principal {
	return withTools(Principal{ID: KindKey + ":" + id, Kind: KindKey, Admin: admin}, tools)
}

// OAuth is the principal of an OAuth access token: issuer and subject
// (an issuer identifier has no fragment, so '#' keeps the pair apart).
func OAuth(issuer, subject string, admin bool, tools model.ToolFilter) Principal {
	return withTools(Principal{ID: KindOAuth + ":" + issuer + "#" + subject, Kind: KindOAuth, Admin: admin}, tools)
}

func withTools(p Principal, tools model.ToolFilter) Principal {
	if !tools.IsZero() {
		p.Tools = &tools
	}
	return p
}

// AllowsTool reports whether the caller's own filter keeps a tool known by
// names (model.ToolNames: the namespaced name first).
func (p Principal) AllowsTool(names ...string) bool {
	return p.Tools == nil || p.Tools.AllowsNames(names...)
}

type ctxKey struct{}

// With returns ctx carrying p: bus requests made with it carry the header.
func With(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// Source is what a context may carry in p's place: the edge's own record
// of its caller (the gateway's *auth.Principal), made a Principal only when
// a bus request needs one, so a request that makes none pays nothing.
type Source interface {
	BusPrincipal() (Principal, bool)
}

// WithSource returns ctx carrying s in place of a Principal.
func WithSource(ctx context.Context, s Source) context.Context {
	return context.WithValue(ctx, ctxKey{}, s)
}

// SourceFrom is the Source ctx carries (nil: none, or a plain Principal).
func SourceFrom(ctx context.Context) Source {
	s, _ := ctx.Value(ctxKey{}).(Source)
	return s
}

// From is the principal ctx carries (false: none).
func From(ctx context.Context) (Principal, bool) {
	switch v := ctx.Value(ctxKey{}).(type) {
	case Principal:
		return v, true
	case Source:
		return v.BusPrincipal()
	}
	return Principal{}, false
}

// Encode is p as a header value.
func (p Principal) Encode() string {
	data, _ := json.Marshal(p)
	return base64.RawURLEncoding.EncodeToString(data)
}

// Decode reads a header value.
func Decode(v string) (Principal, error) {
	bad := func(why string) error {
		return apierr.Newf(apierr.Validation, "the %s header is not valid: %s", Header, why)
	}
	if len(v) > maxHeader {
		return Principal{}, bad("too long")
	}
	data, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return Principal{}, bad("not base64url")
	}
	var p Principal
	if err := json.Unmarshal(data, &p); err != nil {
		return Principal{}, bad("not a principal")
	}
	switch p.Kind {
	case KindKey, KindOAuth, KindAgent:
		if !strings.HasPrefix(p.ID, p.Kind+":") || len(p.ID) == len(p.Kind)+1 {
			return Principal{}, bad("its id does not name its kind")
		}
	case KindOperator:
		if p.ID != KindOperator {
			return Principal{}, bad("its id does not name its kind")
		}
	default:
		return Principal{}, bad("unknown kind " + p.Kind)
	}
	return p, nil
}

// Set writes p into h.
func Set(h nats.Header, p Principal) { h.Set(Header, p.Encode()) }

// FromHeader is the principal of a request's headers: the operator when
// there is none, an error when there is one that does not decode.
func FromHeader(h nats.Header) (Principal, error) {
	v := h.Get(Header)
	if v == "" {
		return Operator(), nil
	}
	return Decode(v)
}

// EndUserKey is the span attribute naming the principal (OpenTelemetry's
// enduser.id): its id, never a secret.
const EndUserKey = attribute.Key("enduser.id")

// Tag names p on the span of ctx (when it records one).
func Tag(ctx context.Context, p Principal) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(EndUserKey.String(p.ID))
	}
}

// Actor is who a request acts for: the principal its context carries (the
// REST API's authenticated caller), else the operator (a bus request
// without a principal header: only the operator sends those).
func Actor(ctx context.Context) string {
	if p, ok := From(ctx); ok {
		return p.ID
	}
	return Operator().ID
}
