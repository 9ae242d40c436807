package registry

import (
	"context"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// source is one registry behind search and get. A source knows only its own
// API: URLs, paging, wire format, and how an answer becomes search hits or
// an install plan. The fan-out, caching, stale fallback, merge and error
// handling are the Service's, written once for every source.
//
// The parsers are returned rather than called by the source so that the
// Service can check an answer before caching it, and reuse a cached one.
type source interface {
	// name is the registry's name in requests, replies and cache keys.
	name() string
	// client fetches from the registry, with its credentials.
	client() *fetcher
	// searchPage is the URL of the search page at cursor ("" for the first)
	// and the parser of its body; window is how many hits the search wants.
	searchPage(q string, window int, cursor string) (rawURL string, read func([]byte) (resultPage, error))
	// entry is the URL of the entry a get request names and the parser of its body.
	entry(in model.RegistryGetRequest) (rawURL string, read func([]byte) (planner, error))
	// notFound is the error for an entry the registry does not have.
	notFound(in model.RegistryGetRequest) error
}

// resultPage is one page of a source's search answer.
type resultPage struct {
	// hits are in the registry's order; the search sets their source, pos
	// and stale, and drops nameless and repeated ones.
	hits []candidate
	// next is the cursor of the following page; "" when there is none.
	next string
}

// planner turns a registry entry, parsed, into an install plan.
type planner interface {
	plan(in model.RegistryGetRequest, h host) (*model.InstallPlan, error)
}

// sourceOf is the source a checked request names.
func (s *Service) sourceOf(name string) source {
	if name == model.RegistryOfficial {
		return officialSource{base: s.official, http: s.offGet}
	}
	return smitherySource{base: s.smithery, http: s.smiGet}
}

// fetched is a registry answer, live or from the cache.
type fetched struct {
	body      []byte
	stale     bool
	fetchedAt time.Time
	liveErr   error // why a stale answer stands in
}

// fetchCached returns src's answer for rawURL: a fresh cache entry, else the
// registry's answer (checked by parse before it is cached), else — when the
// registry is down — the stale cache entry. On success the last call of
// parse was on the body returned.
func (s *Service) fetchCached(ctx context.Context, src source, rawURL string, parse func([]byte) error) (fetched, error) {
	name, f := src.name(), src.client()
	entry, fresh := s.cache.get(ctx, name, rawURL)
	if fresh && parse(entry.Body) == nil {
		s.metrics.lookup(ctx, name, true)
		return fetched{body: entry.Body, fetchedAt: entry.FetchedAt}, nil
	}
	s.metrics.lookup(ctx, name, false)
	began := time.Now()
	body, err := f.get(ctx, rawURL)
	if err == nil {
		if perr := parse(body); perr != nil {
			err = malformed(f.label, perr)
			if ae, ok := perr.(*apierr.Error); ok {
				err = ae // a parser's own verdict (otherEntry) says more
			}
		}
	}
	s.metrics.fetched(ctx, name, began, err)
	if err == nil {
		s.cache.put(ctx, name, rawURL, body)
		return fetched{body: body, fetchedAt: time.Now()}, nil
	}
	if entry != nil && down(err) {
		if parse(entry.Body) == nil {
			s.log.Warn("registry down, serving stale cache", "source", name, "fetched_at", entry.FetchedAt, "error", err)
			return fetched{body: entry.Body, stale: true, fetchedAt: entry.FetchedAt, liveErr: err}, nil
		}
	}
	return fetched{}, err
}

// otherEntry is the error when a registry answers a get with another entry
// than the one asked for (got is shown cleaned: it is the registry's text).
func otherEntry(label, asked, got string) *apierr.Error {
	return apierr.Newf(apierr.ServiceUnavailable, "%s answered the request for %s with %s: refusing an entry that was not asked for",
		label, asked, clean(got, 200))
}
