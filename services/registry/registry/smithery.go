package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// Smithery's registry API: GET {base}/servers?q=&page=&pageSize= and
// GET {base}/servers/{qualifiedName}, with an optional bearer key.

// SmitheryList is one page of GET /servers.
type SmitheryList struct {
	Servers    []SmitheryServer   `json:"servers"`
	Pagination SmitheryPagination `json:"pagination"`
	// Skipped counts the rows left out because they could not be read (a
	// field of the wrong type).
	Skipped int `json:"-"`
}

// SmitheryServer is a row of the list.
type SmitheryServer struct {
	QualifiedName string `json:"qualifiedName"`
	DisplayName   string `json:"displayName"`
	Description   string `json:"description"`
	IconURL       string `json:"iconUrl"`
	Verified      bool   `json:"verified"`
	UseCount      int64  `json:"useCount"`
	Remote        bool   `json:"remote"`
	IsDeployed    bool   `json:"isDeployed"`
	CreatedAt     string `json:"createdAt"`
	Homepage      string `json:"homepage"`
}

// SmitheryPagination is the list's paging data.
type SmitheryPagination struct {
	CurrentPage int `json:"currentPage"`
	PageSize    int `json:"pageSize"`
	TotalPages  int `json:"totalPages"`
	TotalCount  int `json:"totalCount"`
}

// SmitheryDetail is GET /servers/{qualifiedName}.
type SmitheryDetail struct {
	QualifiedName string               `json:"qualifiedName"`
	DisplayName   string               `json:"displayName"`
	Description   string               `json:"description"`
	IconURL       string               `json:"iconUrl"`
	Remote        bool                 `json:"remote"`
	DeploymentURL string               `json:"deploymentUrl"`
	Connections   []SmitheryConnection `json:"connections"`
	Security      *struct {
		ScanPassed bool `json:"scanPassed"`
	} `json:"security"`
	Tools []SmitheryTool `json:"tools"`
}

// SmitheryConnection is one way to connect: http (a hosted URL) or stdio
// (a JS command function or an .mcpb bundle).
type SmitheryConnection struct {
	Type          string          `json:"type"`
	DeploymentURL string          `json:"deploymentUrl"`
	ConfigSchema  json.RawMessage `json:"configSchema"`
	StdioFunction string          `json:"stdioFunction"`
	BundleURL     string          `json:"bundleUrl"`
	Runtime       string          `json:"runtime"`
	Published     bool            `json:"published"`
}

// SmitheryTool is a tool Smithery lists for a server.
type SmitheryTool struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// ConfigField is one property of a connection's config schema.
type ConfigField struct {
	Name        string
	Type        string
	Description string
	Format      string
	Default     any
	Choices     []string
	Required    bool
	// Header is set when Smithery's gateway reads the value from a header
	// (x-from: {header: …}); otherwise it comes from the URL query.
	Header string
}

// ConfigFields reads the top-level properties of a JSON Schema config,
// sorted by name. Nested objects are kept as one field each.
func ConfigFields(schema json.RawMessage) ([]ConfigField, error) {
	if len(schema) == 0 || string(schema) == "null" {
		return nil, nil
	}
	var s struct {
		Properties map[string]struct {
			Type        any    `json:"type"`
			Description string `json:"description"`
			Format      string `json:"format"`
			Default     any    `json:"default"`
			Enum        []any  `json:"enum"`
			XFrom       struct {
				Header string `json:"header"`
			} `json:"x-from"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, err
	}
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	out := make([]ConfigField, 0, len(s.Properties))
	for name, p := range s.Properties {
		f := ConfigField{
			Name: name, Description: p.Description, Format: p.Format, Default: p.Default,
			Required: required[name], Header: p.XFrom.Header,
		}
		if t, ok := p.Type.(string); ok {
			f.Type = t
		}
		for _, e := range p.Enum {
			f.Choices = append(f.Choices, scalarString(e))
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// scalarString renders a JSON scalar default; objects and arrays give "".
func scalarString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}

// ParseSmitheryList decodes a GET /servers body.
func ParseSmitheryList(body []byte) (*SmitheryList, error) {
	var l struct {
		Servers    *[]json.RawMessage `json:"servers"`
		Pagination SmitheryPagination `json:"pagination"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, err
	}
	if l.Servers == nil {
		return nil, fmt.Errorf("no servers array")
	}
	// One unreadable row is left out rather than failing the page (as for
	// the Official Registry); a page of nothing else is a broken registry.
	out := &SmitheryList{Servers: make([]SmitheryServer, 0, len(*l.Servers)), Pagination: l.Pagination}
	var first error
	for i, raw := range *l.Servers {
		var sv SmitheryServer
		if err := json.Unmarshal(raw, &sv); err != nil {
			out.Skipped++
			if first == nil {
				first = fmt.Errorf("servers[%d]: %w", i, err)
			}
			continue
		}
		out.Servers = append(out.Servers, sv)
	}
	if len(out.Servers) == 0 && first != nil {
		return nil, first
	}
	return out, nil
}

// ParseSmitheryDetail decodes a GET /servers/{qualifiedName} body.
func ParseSmitheryDetail(body []byte) (*SmitheryDetail, error) {
	var d SmitheryDetail
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, err
	}
	if d.QualifiedName == "" {
		return nil, fmt.Errorf("server has no qualifiedName")
	}
	return &d, nil
}

func smitheryListURL(base *url.URL, q string, page, pageSize int) string {
	u := base.JoinPath("servers")
	v := url.Values{}
	v.Set("q", q)
	v.Set("page", strconv.Itoa(page))
	v.Set("pageSize", strconv.Itoa(pageSize))
	u.RawQuery = v.Encode()
	return u.String()
}

// smitheryGetURL keeps the '/' of a qualified name (@owner/name) as a path
// separator, as Smithery's own clients do, and escapes each segment.
func smitheryGetURL(base *url.URL, qualifiedName string) string {
	u := *base
	segs := strings.Split(qualifiedName, "/")
	esc := make([]string, len(segs))
	for i, s := range segs {
		esc[i] = url.PathEscape(s)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/servers/" + qualifiedName
	u.RawPath = strings.TrimSuffix(base.EscapedPath(), "/") + "/servers/" + strings.Join(esc, "/")
	u.RawQuery = ""
	return u.String()
}

// SmitheryClient talks to Smithery's registry API.
type SmitheryClient struct {
	base *url.URL
	http *fetcher
}

// NewSmitheryClient returns a client of the registry at baseURL; apiKey, when
// set, is sent as a bearer token.
func NewSmitheryClient(baseURL, apiKey string, hc *http.Client) (*SmitheryClient, error) {
	u, err := parseBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	return &SmitheryClient{base: u, http: newFetcher(SourceSmitheryLabel, hc, bearer(apiKey))}, nil
}

func bearer(key string) func(*http.Request) {
	if key == "" {
		return nil
	}
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+key) }
}

// Search fetches one page (1-based) of GET /servers.
func (c *SmitheryClient) Search(ctx context.Context, q string, page, pageSize int) (*SmitheryList, error) {
	body, err := c.http.get(ctx, smitheryListURL(c.base, q, page, pageSize))
	if err != nil {
		return nil, err
	}
	l, err := ParseSmitheryList(body)
	if err != nil {
		return nil, malformed(SourceSmitheryLabel, err)
	}
	return l, nil
}

// Server fetches the details of one server.
func (c *SmitheryClient) Server(ctx context.Context, qualifiedName string) (*SmitheryDetail, error) {
	body, err := c.http.get(ctx, smitheryGetURL(c.base, qualifiedName))
	if err != nil {
		return nil, err
	}
	d, err := ParseSmitheryDetail(body)
	if err != nil {
		return nil, malformed(SourceSmitheryLabel, err)
	}
	return d, nil
}
