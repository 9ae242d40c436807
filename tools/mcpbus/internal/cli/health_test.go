package cli

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/ops"
	"github.com/mcpbus/mcpbus/libs/testkit"
)

// TestHealth: `mcpbus health` exits 0 on 200 and 1 with the reason on
// anything else — a 503 and its body, no listener, a timeout, a bad URL — and
// asks /readyz when the URL has no path.
func TestHealth(t *testing.T) {
	real, err := ops.Start(ops.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(real.Close)
	var (
		mu    sync.Mutex
		paths []string
	)
	slow := make(chan struct{})
	t.Cleanup(func() { close(slow) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/readyz":
			_, _ = io.WriteString(w, "ok\n")
		case "/slow":
			select {
			case <-slow:
			case <-r.Context().Done():
			}
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	closed := fmt.Sprintf("http://127.0.0.1:%d/readyz", testkit.FreePort(t))

	cases := []struct {
		name        string
		args        []string
		code        int
		out, errOut string
	}{
		{"ready", []string{srv.URL + "/readyz"}, 0, "ok", ""},
		{"no path asks readyz", []string{srv.URL}, 0, "ok", ""},
		{"json", []string{"--json", srv.URL + "/readyz"}, 0, `"status": "ok"`, ""},
		{"not ready", []string{"http://" + real.Addr() + "/readyz"}, 1, "", "503: not ready: starting"},
		{"live", []string{"http://" + real.Addr() + "/healthz"}, 0, "ok", ""},
		{"server error", []string{srv.URL + "/other"}, 1, "", "500: Internal Server Error"},
		{"refused", []string{closed}, 1, "", "no answer"},
		{"timeout", []string{"--max-time", "200ms", srv.URL + "/slow"}, 1, "", "no answer"},
		{"bad url", []string{"127.0.0.1:9464/readyz"}, 1, "", "not an http(s) URL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			start := time.Now()
			code := Main(append([]string{"health"}, c.args...), strings.NewReader(""), &out, &errOut)
			if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errOut.String(), c.errOut) {
				t.Errorf("health %v: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
					c.args, code, out.String(), errOut.String(), c.code, c.out, c.errOut)
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %s", took)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) < 2 || paths[1] != "/readyz" {
		t.Errorf("asked %q; a URL without a path must ask /readyz", paths)
	}
}
