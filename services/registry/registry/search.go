package registry

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// sourceHits is one source's part of a search.
type sourceHits struct {
	source string
	hits   []candidate
	more   bool
	stale  bool
	// warn is a failure that left results (stale or partial); err one that left none.
	warn error
	err  error
}

// Search answers mcp.v1.registry.search.
func (s *Service) Search(ctx context.Context, in model.RegistrySearchRequest) (*model.RegistrySearchReply, error) {
	q, sources, page, size, err := checkSearch(in)
	if err != nil {
		return nil, err
	}
	// Every page of a query comes out of the same window (at least the first
	// 100 hits of each source), so moving through pages does not reshuffle them.
	window := (page*size + 99) / 100 * 100
	results := make([]sourceHits, len(sources))
	var wg sync.WaitGroup
	for i, name := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, s.opts.SourceTimeout)
			defer cancel()
			results[i] = s.search(sctx, s.sourceOf(name), q, window)
		}()
	}
	wg.Wait()

	reply := &model.RegistrySearchReply{Page: page, PageSize: size, Results: []model.RegistryResult{}}
	var official, smithery []candidate
	var failed []sourceHits
	more := false
	for _, r := range results {
		if r.err != nil {
			failed = append(failed, r)
			reply.Warnings = append(reply.Warnings, warning(r.source, r.err))
			continue
		}
		if r.warn != nil {
			reply.Warnings = append(reply.Warnings, warning(r.source, r.warn))
		}
		reply.Stale = reply.Stale || r.stale
		more = more || r.more
		if r.source == model.RegistryOfficial {
			official = r.hits
		} else {
			smithery = r.hits
		}
	}
	if len(failed) == len(results) {
		return nil, allFailed(failed)
	}
	all := mergeRank(q, official, smithery)
	reply.Total = len(all)
	start := min((page-1)*size, len(all))
	end := min(start+size, len(all))
	reply.Results = append(reply.Results, all[start:end]...)
	reply.HasMore = end < len(all) || more
	return reply, nil
}

func warning(source string, err error) model.RegistryWarning {
	e := apierr.From(err)
	return model.RegistryWarning{Source: source, Code: string(e.Code), Message: e.Message}
}

// allFailed is the error when no source answered: the shared code when they
// agree (UNAUTHORIZED from the only source asked), else SERVICE_UNAVAILABLE
// — or NETWORK_ERROR when every source timed out or was unreachable.
func allFailed(failed []sourceHits) error {
	code := apierr.Of(failed[0].err)
	msgs := make([]string, 0, len(failed))
	for _, f := range failed {
		if apierr.Of(f.err) != code {
			code = apierr.ServiceUnavailable
		}
		msgs = append(msgs, apierr.From(f.err).Message)
	}
	if len(failed) > 1 && code != apierr.Network {
		code = apierr.ServiceUnavailable
	}
	return apierr.New(code, strings.Join(msgs, "; "))
}

// search walks src's search pages until window hits are in or the registry
// has no more. A failure after the first page keeps the hits so far.
//
// A registry steers the walk with its cursors, so the walk does not trust
// them: a cursor seen before, or a page that lists only servers already
// listed, ends it (the registry goes round), and it asks for at most
// maxSearchPages(window) pages.
func (s *Service) search(ctx context.Context, src source, q string, window int) sourceHits {
	out := sourceHits{source: src.name()}
	seen := map[string]bool{}
	cursors := map[string]bool{"": true}
	cursor := ""
	for pages := 0; len(out.hits) < window; pages++ {
		if pages == maxSearchPages(window) {
			out.more = true
			return out
		}
		rawURL, read := src.searchPage(q, window, cursor)
		var page resultPage
		f, err := s.fetchCached(ctx, src, rawURL, func(b []byte) (err error) {
			page, err = read(b)
			return err
		})
		if err != nil {
			if len(out.hits) == 0 {
				out.err = err
			} else {
				out.warn, out.more = err, true
			}
			return out
		}
		if f.stale {
			out.stale = true
			out.warn = staleWarning(f)
		}
		added := 0
		for _, c := range page.hits {
			if c.name == "" || seen[c.name] {
				continue
			}
			seen[c.name] = true
			c.source, c.pos, c.stale = src.name(), len(out.hits), f.stale
			out.hits = append(out.hits, c)
			added++
		}
		if page.next == "" || cursors[page.next] || (len(page.hits) > 0 && added == 0) {
			return out
		}
		cursors[page.next] = true
		cursor = page.next
	}
	// The window is full and the registry has a next page.
	out.more = true
	return out
}

// maxSearchPages bounds the pages one search asks a registry for: those
// the window needs (100 hits a page) and a few more for pages whose entries
// the search drops (inactive, not the latest).
func maxSearchPages(window int) int { return (window+99)/100 + 5 }

func staleWarning(f fetched) error {
	e := apierr.From(f.liveErr)
	return apierr.Newf(e.Code, "%s; showing cached results from %s", e.Message, f.fetchedAt.UTC().Format(time.RFC3339))
}

// checkSearch validates a search request and applies its defaults.
func checkSearch(in model.RegistrySearchRequest) (q string, sources []string, page, size int, err error) {
	q = strings.TrimSpace(in.Query)
	switch {
	case q == "":
		return "", nil, 0, 0, apierr.Invalid("query", "query is required")
	case utf8.RuneCountInString(q) > model.MaxRegistryQueryLen:
		return "", nil, 0, 0, apierr.Invalid("query", fmt.Sprintf("query must be at most %d characters", model.MaxRegistryQueryLen))
	case !utf8.ValidString(q) || strings.ContainsFunc(q, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "", nil, 0, 0, apierr.Invalid("query", "query must be text without control characters")
	}
	switch in.Registry {
	case "", model.RegistryBoth:
		sources = []string{model.RegistryOfficial, model.RegistrySmithery}
	case model.RegistryOfficial, model.RegistrySmithery:
		sources = []string{in.Registry}
	default:
		return "", nil, 0, 0, apierr.Invalid("registry", "registry must be official, smithery or both")
	}
	page, size = in.Page, in.PageSize
	if page == 0 {
		page = 1
	}
	if size == 0 {
		size = model.DefaultRegistryPageSize
	}
	switch {
	case page < 0:
		return "", nil, 0, 0, apierr.Invalid("page", "page must be 1 or more")
	case size < 0 || size > model.MaxRegistryPageSize:
		return "", nil, 0, 0, apierr.Invalid("page_size", fmt.Sprintf("page_size must be between 1 and %d", model.MaxRegistryPageSize))
	case page > model.MaxRegistryResults/size:
		return "", nil, 0, 0, apierr.Invalid("page", fmt.Sprintf("page × page_size must be at most %d: refine the query", model.MaxRegistryResults))
	}
	return q, sources, page, size, nil
}
