package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/gateway/gateway"
)

// A cross-site page can POST text/plain (or a form) without a preflight:
// such a request to the admin API is refused and creates nothing, with
// auth and with --no-auth; so is a JSON request from a foreign Origin. The
// same request, properly typed and from no browser, creates the server.
func TestCrossSiteServerCreateRefused(t *testing.T) {
	t.Parallel()
	for _, noAuth := range []bool{false, true} {
		e := startMCP(t, gateway.Options{NoAuth: noAuth})
		key := e.admin
		if noAuth {
			key = ""
		}
		send := func(name string, hdr map[string]string) reply {
			t.Helper()
			data, err := json.Marshal(model.ConfigCreateRequest{Config: model.McpConfig{Name: name, Enabled: false,
				Package:   model.Package{Type: model.PackageBinary, Identifier: "/bin/true"},
				Transport: model.Transport{Type: model.TransportStdio}}})
			if err != nil {
				t.Fatal(err)
			}
			body := string(data)
			req, err := http.NewRequestWithContext(ctxT(t, 30e9), "POST", e.url+"/api/v1/servers", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b strings.Builder
			buf := make([]byte, 4096)
			for {
				n, err := resp.Body.Read(buf)
				b.WriteString(string(buf[:n]))
				if err != nil {
					break
				}
			}
			return reply{status: resp.StatusCode, header: resp.Header, body: []byte(b.String())}
		}
		r := send("csrf-plain", map[string]string{"Content-Type": "text/plain;charset=UTF-8", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
		if r.status != http.StatusForbidden {
			t.Fatalf("noauth=%v cross-site text/plain POST: %d %s", noAuth, r.status, r.body)
		}
		r = send("csrf-plain", map[string]string{"Content-Type": "text/plain"})
		if r.status != http.StatusUnsupportedMediaType || r.contract(t).Code != "VALIDATION_ERROR" {
			t.Fatalf("noauth=%v text/plain POST: %d %s", noAuth, r.status, r.body)
		}
		r = send("csrf-json", map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"})
		if r.status != http.StatusForbidden {
			t.Fatalf("noauth=%v foreign-origin JSON POST: %d %s", noAuth, r.status, r.body)
		}
		list := httpDo(t, "GET", e.url+"/api/v1/servers", key, nil)
		if list.status != http.StatusOK || strings.Contains(string(list.body), "csrf-") {
			t.Fatalf("noauth=%v refused requests changed the servers: %d %s", noAuth, list.status, list.body)
		}
		if r := send("plain-ok", map[string]string{"Content-Type": "application/json"}); r.status >= 300 {
			t.Fatalf("noauth=%v a proper create: %d %s", noAuth, r.status, r.body)
		}
		if list := httpDo(t, "GET", e.url+"/api/v1/servers", key, nil); !strings.Contains(string(list.body), "plain-ok") {
			t.Fatalf("noauth=%v the proper create is not listed: %s", noAuth, list.body)
		}
	}
}
