package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/netguard"
)

// Labels of the sources in error messages.
const (
	SourceOfficialLabel = "official registry"
	SourceSmitheryLabel = "Smithery registry"
)

// maxBody bounds a registry response: a page of 100 servers is a few hundred KiB.
const maxBody = 8 << 20

// maxValues bounds the JSON values (array elements and object members) of
// a response. A page of 100 servers has a few thousand; the bytes alone do
// not bound the memory an answer takes, as each {} of 3 bytes in a list
// of servers or packages decodes into structs of a kilobyte or more: 8 MiB
// of them took gigabytes.
const maxValues = 50_000

// fetcher GETs JSON from one registry and maps failures to the contract.
type fetcher struct {
	label string
	hc    *http.Client
	// auth adds credentials to a request (the Smithery bearer key); nil for none.
	auth func(*http.Request)
}

func newFetcher(label string, hc *http.Client, auth func(*http.Request)) *fetcher {
	if hc == nil {
		hc = &http.Client{}
	}
	return &fetcher{label: label, hc: guardRedirects(hc), auth: auth}
}

// maxRedirects bounds the redirects one registry request follows.
const maxRedirects = 5

// guardRedirects is a copy of hc whose redirects a registry cannot turn
// against mcpbus: none from https to http (the Smithery key would follow in
// clear text, and anyone on the path could answer), and none from a public
// registry to an internal host (cloud metadata, the NATS monitor, an admin
// port on the LAN), which mcpbus would then GET from inside and whose
// status (or JSON) it would report back. A registry the operator runs inside their network (its base URL
// names an internal host) may redirect there.
func guardRedirects(hc *http.Client) *http.Client {
	c := *hc
	prev := hc.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		first, last := via[0].URL, via[len(via)-1].URL
		if last.Scheme == "https" && req.URL.Scheme != "https" {
			return fmt.Errorf("refused a redirect from https to %s", req.URL.Scheme)
		}
		if netguard.InternalHost(req.URL.Hostname()) && !netguard.InternalHost(first.Hostname()) {
			return fmt.Errorf("refused a redirect to %s: an internal address", req.URL.Host)
		}
		if prev != nil {
			return prev(req, via)
		}
		return nil
	}
	return &c
}

// get returns the body of a 200 answer. Errors carry codes: 401/403
// UNAUTHORIZED, 404 NOT_FOUND, 429 RATE_LIMITED, other statuses
// SERVICE_UNAVAILABLE, transport failures and timeouts NETWORK_ERROR.
func (f *fetcher) get(ctx context.Context, rawURL string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, apierr.Wrap(apierr.Internal, f.label+": bad request URL", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "mcpbus-registry/"+Version)
	if f.auth != nil {
		f.auth(req)
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		// The URL error text names the host, never the Authorization header.
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, apierr.Wrap(apierr.Network, f.label+" did not answer in time", err)
		}
		return nil, apierr.Wrap(apierr.Network, f.label+" is unreachable: "+transportError(err), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
		return nil, statusError(f.label, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, apierr.Wrap(apierr.Network, f.label+" did not answer in time", err)
		}
		return nil, apierr.Wrap(apierr.Network, f.label+": reading the answer: "+transportError(err), err)
	}
	if len(body) > maxBody {
		return nil, apierr.Newf(apierr.ServiceUnavailable, "%s answered with more than %d MiB", f.label, maxBody>>20)
	}
	if tooManyValues(body, maxValues) {
		return nil, apierr.Newf(apierr.ServiceUnavailable, "%s answered with more than %d JSON values", f.label, maxValues)
	}
	return body, nil
}

// tooManyValues reports whether the JSON text b holds more than limit
// values, counted before decoding: every value but the first follows a
// '[', '{' or ',' outside a string.
func tooManyValues(b []byte, limit int) bool {
	n := 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{' || c == ',':
			n++
			if n > limit {
				return true
			}
		}
	}
	return false
}

func statusError(label string, status int, retryAfter string) *apierr.Error {
	text := fmt.Sprintf("%s answered %d %s", label, status, http.StatusText(status))
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return apierr.New(apierr.Unauthorized, text+": check the API key")
	case status == http.StatusNotFound:
		return apierr.New(apierr.NotFound, text)
	case status == http.StatusTooManyRequests:
		// seeds/002 §11.1: the user is told when to try again.
		return apierr.New(apierr.RateLimited, text+". "+rateLimitedText(retryAfter, time.Now()))
	}
	return apierr.New(apierr.ServiceUnavailable, text)
}

// rateLimitedText says when to try again after a 429 whose Retry-After (in
// seconds or an HTTP date) is v; without one, or with one past a day, later.
func rateLimitedText(v string, now time.Time) string {
	v = strings.TrimSpace(v)
	secs, err := strconv.Atoi(v)
	if err != nil {
		at, derr := http.ParseTime(v)
		if derr != nil {
			return "Rate limited. Try again later."
		}
		secs = int(math.Ceil(at.Sub(now).Seconds()))
	}
	switch {
	case secs < 0 || secs > 86400:
		return "Rate limited. Try again later."
	case secs <= 1:
		return "Rate limited. Try again in 1 second."
	}
	return fmt.Sprintf("Rate limited. Try again in %d seconds.", secs)
}

// transportError keeps the useful tail of a transport error (the *url.Error
// prefix repeats the method and URL).
func transportError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// down reports whether err means the registry is unavailable (so a stale
// cache entry may stand in), as opposed to an answer about the request.
func down(err error) bool {
	switch apierr.Of(err) {
	case apierr.Network, apierr.ServiceUnavailable, apierr.RateLimited:
		return true
	}
	return false
}

// parseBaseURL checks a configured registry base URL.
func parseBaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("registry URL %q must be an http(s) URL", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("registry URL %q must have no credentials, query or fragment", raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, nil
}
