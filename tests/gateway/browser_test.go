package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"regexp"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/oauthtest"
	"github.com/mcpbus/mcpbus/services/gateway/oauthflow"
)

// browser is a user's browser: it keeps the gateway's cookies.
type browser struct {
	t  *testing.T
	hc *http.Client
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, hc: &http.Client{Timeout: time.Minute, Jar: jar}}
}

// continueLink is the console's page of a per-principal flow: its server
// and flow id.
var continueLink = regexp.MustCompile(`^(http://[^/]+)` + regexp.QuoteMeta(oauthflow.ContinuePath) + `([^/]+)/([0-9a-f]{64})$`)

// continueFlow does what the console's page does when a user signed in
// with key opens link: it continues the flow and answers the provider's
// URL (status and body of the refusal otherwise).
func (b *browser) continueFlow(link, key string) (string, int, string) {
	b.t.Helper()
	m := continueLink.FindStringSubmatch(link)
	if m == nil {
		b.t.Fatalf("%q is not the console's link of a flow", link)
	}
	body, _ := json.Marshal(model.OAuthContinueRequest{Flow: m[3]})
	req, err := http.NewRequest("POST", m[1]+"/api/v1/me/authorizations/"+m[2]+"/continue", bytes.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.hc.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out model.OAuthContinueReply
	if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &out) != nil || out.AuthorizationURL == "" {
		return "", resp.StatusCode, string(data)
	}
	return out.AuthorizationURL, resp.StatusCode, string(data)
}

// approve opens the provider's URL as user (the test authorization server
// approves at once) and follows it back to the gateway's callback.
func (b *browser) approve(authURL, user string) (int, string) {
	b.t.Helper()
	resp, err := b.hc.Get(authURL + "&" + oauthtest.UserParam + "=" + user)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// authorizeLink completes a per-principal flow's link as the user signed
// in with key and approving upstream as user, in a browser of their own.
func authorizeLink(t *testing.T, link, key, user string) (int, string) {
	t.Helper()
	b := newBrowser(t)
	u, code, body := b.continueFlow(link, key)
	if u == "" {
		t.Fatalf("continuing %s: %d %s", link, code, body)
	}
	return b.approve(u, user)
}
