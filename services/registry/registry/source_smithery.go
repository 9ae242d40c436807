package registry

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// smitherySource is Smithery's registry as a source of search hits and
// install plans.
type smitherySource struct {
	base *url.URL
	http *fetcher
}

func (smitherySource) name() string { return model.RegistrySmithery }

func (s smitherySource) client() *fetcher { return s.http }

// searchPage asks GET /servers; the cursor is the page number ("" for 1).
func (s smitherySource) searchPage(q string, window int, cursor string) (string, func([]byte) (resultPage, error)) {
	num := 1
	if cursor != "" {
		num, _ = strconv.Atoi(cursor) // only ever a cursor this method made
	}
	size := min(window, 100)
	rawURL := smitheryListURL(s.base, q, num, size)
	return rawURL, func(body []byte) (resultPage, error) {
		list, err := ParseSmitheryList(body)
		if err != nil {
			return resultPage{}, err
		}
		var p resultPage
		for _, sv := range list.Servers {
			if !hitName(sv.QualifiedName, smitheryNamePattern) {
				continue
			}
			p.hits = append(p.hits, candidate{
				name:  sv.QualifiedName,
				title: clean(sv.DisplayName, 200), description: clean(sv.Description, 1000),
				homepage: link(sv.Homepage), iconURL: link(sv.IconURL), verified: sv.Verified, useCount: sv.UseCount,
				remote: sv.Remote,
			})
		}
		// Without a page count, a short page is the last.
		last := list.Pagination.TotalPages
		rows := len(list.Servers) + list.Skipped
		done := rows == 0 || (last > 0 && num >= last) || (last == 0 && rows < size)
		if !done {
			p.next = strconv.Itoa(num + 1)
		}
		return p, nil
	}
}

// entry asks GET /servers/{qualifiedName}.
func (s smitherySource) entry(in model.RegistryGetRequest) (string, func([]byte) (planner, error)) {
	rawURL := smitheryGetURL(s.base, in.Name)
	return rawURL, func(body []byte) (planner, error) {
		d, err := ParseSmitheryDetail(body)
		if err != nil {
			return nil, err
		}
		if !strings.EqualFold(d.QualifiedName, in.Name) {
			return nil, otherEntry(SourceSmitheryLabel, in.Name, d.QualifiedName)
		}
		return smitheryPlanner{detail: d, url: rawURL}, nil
	}
}

func (smitherySource) notFound(in model.RegistryGetRequest) error {
	return apierr.Newf(apierr.NotFound, "%s is not in the Smithery registry", in.Name).WithField("name")
}
