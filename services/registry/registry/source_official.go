package registry

import (
	"net/url"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// officialSource is the Official MCP Registry (or a private sub-registry
// speaking its API) as a source of search hits and install plans.
type officialSource struct {
	base *url.URL
	http *fetcher
}

func (officialSource) name() string { return model.RegistryOfficial }

func (o officialSource) client() *fetcher { return o.http }

// searchPage asks GET /v0.1/servers for latest versions only; the cursor is
// the registry's own.
func (o officialSource) searchPage(q string, window int, cursor string) (string, func([]byte) (resultPage, error)) {
	rawURL := officialListURL(o.base, ListParams{Search: q, Limit: min(window, 100), Cursor: cursor, Version: "latest"})
	return rawURL, func(body []byte) (resultPage, error) {
		list, err := ParseOfficialList(body)
		if err != nil {
			return resultPage{}, err
		}
		var p resultPage
		for _, e := range list.Servers {
			if !e.Active() || !e.IsLatest || !hitName(e.Server.Name, officialNamePattern) {
				continue
			}
			p.hits = append(p.hits, candidate{
				name:  e.Server.Name,
				title: clean(e.Server.Title, 200), description: clean(e.Server.Description, 1000),
				version: hitVersion(e.Server.Version), homepage: link(e.Server.WebsiteURL), verified: true,
				remote: len(e.Server.Remotes) > 0,
			})
		}
		// A repeated cursor or an empty page ends the walk: asking again
		// would loop.
		if list.NextCursor != cursor && len(list.Servers) > 0 {
			p.next = list.NextCursor
		}
		return p, nil
	}
}

// entry asks GET /v0.1/servers/{name}/versions/{version}.
func (o officialSource) entry(in model.RegistryGetRequest) (string, func([]byte) (planner, error)) {
	rawURL := officialGetURL(o.base, in.Name, officialVersion(in))
	return rawURL, func(body []byte) (planner, error) {
		e, err := ParseOfficialEntry(body)
		if err != nil {
			return nil, err
		}
		// A registry (or a mirror) answering with another server or another
		// version would have the user install what they did not choose.
		if !strings.EqualFold(e.Server.Name, in.Name) {
			return nil, otherEntry(SourceOfficialLabel, in.Name, e.Server.Name)
		}
		if v := officialVersion(in); v != "latest" && e.Server.Version != v {
			return nil, otherEntry(SourceOfficialLabel, in.Name+" version "+v, "version "+e.Server.Version)
		}
		return officialPlanner{entry: e, url: rawURL}, nil
	}
}

func (officialSource) notFound(in model.RegistryGetRequest) error {
	return apierr.Newf(apierr.NotFound, "%s (version %s) is not in the official registry", in.Name, officialVersion(in)).WithField("name")
}

// officialVersion is the version a get asks for: the latest unless it names one.
func officialVersion(in model.RegistryGetRequest) string {
	if in.Version == "" {
		return "latest"
	}
	return in.Version
}
