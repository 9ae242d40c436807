package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/service"
)

// defaultHealthURL is the readiness probe of an operations endpoint at the
// address the docs suggest for --metrics-addr.
const defaultHealthURL = "http://" + service.DefaultMetricsAddr + "/readyz"

// newHealthCmd is a health probe for images without curl or wget: GET the
// URL, exit 0 on 200, 1 with the reason otherwise.
func newHealthCmd(g *globals) *cobra.Command {
	var maxTime time.Duration
	cmd := &cobra.Command{
		Use:   "health [url]",
		Short: "Probe an operations endpoint (/readyz, /healthz): exit 0 when it answers 200 (a container healthcheck)",
		Long: `health GETs the URL (default ` + defaultHealthURL + `, the readiness of a process
started with --metrics-addr ` + service.DefaultMetricsAddr + `) and exits 0 when it answers 200 OK,
1 with the reason otherwise (refused, timed out, or the endpoint's own "not ready: …").
A URL without a path asks /readyz. It needs no NATS and no identity:
  HEALTHCHECK CMD ["mcpbus", "health", "http://127.0.0.1:9464/readyz"]`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target := defaultHealthURL
			if len(args) == 1 {
				target = args[0]
			}
			body, err := probe(cmd.Context(), target, maxTime)
			if err != nil {
				return err
			}
			if !g.json {
				fmt.Fprintln(g.stdout, body)
				return nil
			}
			return g.printJSON(map[string]string{"url": target, "status": body})
		},
	}
	cmd.Flags().DurationVar(&maxTime, "max-time", 3*time.Second, "how long to wait for the answer")
	return cmd
}

// probe GETs target and returns its body (trimmed) when the answer is 200.
func probe(ctx context.Context, target string, maxTime time.Duration) (string, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", apierr.Invalid("url", fmt.Sprintf("%q is not an http(s) URL (e.g. %s)", target, defaultHealthURL))
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/readyz"
	}
	if maxTime <= 0 {
		maxTime = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, maxTime)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", apierr.Invalid("url", err.Error())
	}
	// No proxy: a probe asks the process next to it, never through a proxy.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return "", apierr.Wrap(apierr.ServiceUnavailable, fmt.Sprintf("%s: no answer: %v", u, unwrapURLError(err)), err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	body := strings.TrimSpace(string(data))
	if resp.StatusCode != http.StatusOK {
		if body == "" {
			body = http.StatusText(resp.StatusCode)
		}
		return "", apierr.Newf(apierr.ServiceUnavailable, "%s: %d: %s", u, resp.StatusCode, oneLine(body, 200))
	}
	return oneLine(body, 200), nil
}

// unwrapURLError drops the "Get <url>:" that *url.Error adds (the message names the URL already).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
