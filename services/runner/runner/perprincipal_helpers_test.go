package runner_test

import (
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// perPrincipalRemote is a per-principal HTTP server "remote" at url, started
// at once, whose Authorization header is a secret: the server's own on its
// session, each principal's own on theirs (the tests' resolvers answer them).
func perPrincipalRemote(url string) model.McpConfig {
	return model.McpConfig{ID: uuid.NewString(), Name: "remote", Enabled: true, AuthType: model.AuthAPIKey,
		Package:   model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url, SecretHeaders: []string{"Authorization"}},
		Auth:      model.ServerAuth{PerPrincipal: true},
		Runtime:   model.Runtime{Eager: true}}
}

// aliceEcho is a call of remote's echo by the principal key:alice, which
// goes upstream on her own session of a per-principal server.
func aliceEcho() *nats.Msg {
	msg := nats.NewMsg(bus.NewSubjects("").Call("remote", "echo"))
	msg.Data = []byte(`{"message":"hi"}`)
	msg.Header.Set(bus.HeaderRequestID, uuid.NewString())
	principal.Set(msg.Header, principal.Principal{ID: "key:alice", Kind: principal.KindKey})
	return msg
}
