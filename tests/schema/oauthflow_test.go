package schema

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/oauthtest"
	"github.com/mcpbus/mcpbus/libs/testmcp"
	"github.com/mcpbus/mcpbus/tools/mcpbus/stack"
)

// driveOAuth starts the authorization of a remote server that needs OAuth
// (mcp.v1.oauth.start, served by the gateway) and has the authorization
// server deny it, so the flow ends with its failed event
// (mcp.v1.events.oauth.<server>); then authorizes it, so that the callback
// relayed to the flow's gateway (mcp.v1.oauth.callback.<flow>) succeeds.
func driveOAuth(t *testing.T, ctx context.Context, sys *stack.Stack, sec secrets) {
	t.Helper()
	cl := sys.Client
	// A confidential client: its secret is read by the gateway on
	// mcp.v1.cred.oauthclient.
	const clientID = "schema-confidential"
	as := oauthtest.Start(t, oauthtest.Options{Clients: map[string]string{clientID: sec.value("oauth-confidential-secret")}})
	url := testmcp.ServeProtected(t, "schema-remote", as)
	cfg, err := cl.CreateConfig(ctx, model.McpConfig{Name: "schema-remote",
		Package:   model.Package{Type: model.PackageHTTP, Identifier: url},
		Transport: model.Transport{Type: model.TransportHTTP, URL: url, OAuth: &model.TransportOAuth{ClientID: clientID}}}, nil)
	if err != nil {
		t.Fatalf("creating the remote server: %v", err)
	}
	if _, err := credclient.New(sys.Conn, "").Set(ctx, model.CredSetRequest{ServerID: model.OAuthClientCredentialID(cfg.ID), Kind: model.CredOAuthClient,
		Credentials: model.Credentials{Env: map[string]string{model.OAuthClientSecretName: sec.value("oauth-confidential-secret")}}}); err != nil {
		t.Fatalf("storing the OAuth client secret: %v", err)
	}
	if _, _, err := cl.AuthorizeServer(ctx, "no-such-server"); apierr.Of(err) != apierr.NotFound {
		t.Fatalf("oauth.start of an unknown server: %v, want NOT_FOUND", err)
	}
	out, wait, err := cl.AuthorizeServer(ctx, "schema-remote")
	if err != nil {
		t.Fatalf("oauth.start: %v", err)
	}
	as.Deny(true)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(out.AuthorizationURL) // the user's browser
	if err != nil {
		t.Fatalf("following the authorization URL: %v", err)
	}
	_ = resp.Body.Close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := wait(wctx); apierr.From(err).Message != model.MsgAuthorizeFailed {
		t.Fatalf("denied authorization: %v, want %q", err, model.MsgAuthorizeFailed)
	}

	as.Deny(false)
	out, wait, err = cl.AuthorizeServer(ctx, "schema-remote")
	if err != nil {
		t.Fatalf("oauth.start: %v", err)
	}
	if resp, err = (&http.Client{Timeout: 30 * time.Second}).Get(out.AuthorizationURL); err != nil {
		t.Fatalf("following the authorization URL: %v", err)
	}
	_ = resp.Body.Close()
	if err := wait(wctx); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("authorization: %v, callback page %d", err, resp.StatusCode)
	}
}
