package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// The Official MCP Registry API v0.1 (docs/reference/api/openapi.yaml of
// modelcontextprotocol/registry). Field names changed from snake_case to
// camelCase in the 2025-09-16 schema; both are read, camelCase first.

// OfficialMetaKey is the _meta key under which the registry adds its own data.
const OfficialMetaKey = "io.modelcontextprotocol.registry/official"

// Statuses of an Official Registry entry.
const (
	StatusActive     = "active"
	StatusDeprecated = "deprecated"
	StatusDeleted    = "deleted"
)

// OfficialList is GET /v0.1/servers: ServerList.
type OfficialList struct {
	Servers    []OfficialEntry
	NextCursor string
	Count      int
	// Skipped counts the entries left out because they could not be read
	// (a field of the wrong type).
	Skipped int
}

// OfficialEntry is a ServerResponse: the server.json plus the registry's metadata.
type OfficialEntry struct {
	Server      ServerJSON
	Status      string
	PublishedAt time.Time
	UpdatedAt   time.Time
	IsLatest    bool
}

// Active reports whether the entry may be offered (a missing status, from
// registries older than the field, counts as active).
func (e OfficialEntry) Active() bool { return e.Status == "" || e.Status == StatusActive }

// ServerJSON is the server.json of an entry.
type ServerJSON struct {
	Name        string
	Title       string
	Description string
	Version     string
	WebsiteURL  string
	Repository  Repository
	Packages    []Package
	Remotes     []Remote
}

// Repository is where the server's source lives.
type Repository struct {
	URL       string `json:"url,omitempty"`
	Source    string `json:"source,omitempty"`
	Subfolder string `json:"subfolder,omitempty"`
}

// Package is one installable package of a server.
type Package struct {
	RegistryType         string
	RegistryBaseURL      string
	Identifier           string
	Version              string
	FileSHA256           string
	RuntimeHint          string
	Transport            Remote
	RuntimeArguments     []Argument
	PackageArguments     []Argument
	EnvironmentVariables []KeyValueInput
}

// Remote is a transport: a package's (stdio, streamable-http, sse) or a
// hosted endpoint's, with URL {var} templating.
type Remote struct {
	Type      string
	URL       string
	Headers   []KeyValueInput
	Variables map[string]Input
}

// Input is a value the user may have to provide.
type Input struct {
	Description string
	IsRequired  bool
	Format      string
	Value       string
	IsSecret    bool
	Default     string
	Placeholder string
	Choices     []string
	Variables   map[string]Input
}

// KeyValueInput is a named input: an environment variable or a header.
type KeyValueInput struct {
	Input
	Name string
}

// Argument is a positional or named argument of a package or its runtime.
type Argument struct {
	Input
	Type       string
	Name       string
	ValueHint  string
	IsRepeated bool
}

// Wire forms, camelCase and snake_case side by side.

type wireList struct {
	Servers  []json.RawMessage `json:"servers"`
	Metadata struct {
		NextCursor    string `json:"nextCursor"`
		NextCursorOld string `json:"next_cursor"`
		Count         int    `json:"count"`
	} `json:"metadata"`
}

type wireEntry struct {
	Server json.RawMessage            `json:"server"`
	Meta   map[string]json.RawMessage `json:"_meta"`
}

type wireOfficialMeta struct {
	Status         string    `json:"status"`
	PublishedAt    time.Time `json:"publishedAt"`
	PublishedAtOld time.Time `json:"published_at"`
	UpdatedAt      time.Time `json:"updatedAt"`
	UpdatedAtOld   time.Time `json:"updated_at"`
	IsLatest       *bool     `json:"isLatest"`
	IsLatestOld    *bool     `json:"is_latest"`
}

type wireServer struct {
	Name          string        `json:"name"`
	Title         string        `json:"title"`
	Description   string        `json:"description"`
	Version       string        `json:"version"`
	Status        string        `json:"status"` // before the 2025-09-22 schema
	WebsiteURL    string        `json:"websiteUrl"`
	WebsiteURLOld string        `json:"website_url"`
	Repository    Repository    `json:"repository"`
	Packages      []wirePackage `json:"packages"`
	Remotes       []wireRemote  `json:"remotes"`
}

type wirePackage struct {
	RegistryType            string         `json:"registryType"`
	RegistryTypeOld         string         `json:"registry_type"`
	RegistryBaseURL         string         `json:"registryBaseUrl"`
	RegistryBaseURLOld      string         `json:"registry_base_url"`
	Identifier              string         `json:"identifier"`
	Version                 string         `json:"version"`
	FileSHA256              string         `json:"fileSha256"`
	FileSHA256Old           string         `json:"file_sha256"`
	RuntimeHint             string         `json:"runtimeHint"`
	RuntimeHintOld          string         `json:"runtime_hint"`
	Transport               wireRemote     `json:"transport"`
	RuntimeArguments        []wireArgument `json:"runtimeArguments"`
	RuntimeArgumentsOld     []wireArgument `json:"runtime_arguments"`
	PackageArguments        []wireArgument `json:"packageArguments"`
	PackageArgumentsOld     []wireArgument `json:"package_arguments"`
	EnvironmentVariables    []wireKeyValue `json:"environmentVariables"`
	EnvironmentVariablesOld []wireKeyValue `json:"environment_variables"`
}

type wireRemote struct {
	Type      string               `json:"type"`
	URL       string               `json:"url"`
	Headers   []wireKeyValue       `json:"headers"`
	Variables map[string]wireInput `json:"variables"`
}

type wireInput struct {
	Description string               `json:"description"`
	IsRequired  *bool                `json:"isRequired"`
	IsRequired2 *bool                `json:"is_required"`
	Format      string               `json:"format"`
	Value       string               `json:"value"`
	IsSecret    *bool                `json:"isSecret"`
	IsSecret2   *bool                `json:"is_secret"`
	Default     string               `json:"default"`
	Placeholder string               `json:"placeholder"`
	Choices     []string             `json:"choices"`
	Variables   map[string]wireInput `json:"variables"`
}

type wireKeyValue struct {
	wireInput
	Name string `json:"name"`
}

type wireArgument struct {
	wireInput
	Type          string `json:"type"`
	Name          string `json:"name"`
	ValueHint     string `json:"valueHint"`
	ValueHintOld  string `json:"value_hint"`
	IsRepeated    *bool  `json:"isRepeated"`
	IsRepeatedOld *bool  `json:"is_repeated"`
}

func or(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func orBool(b ...*bool) bool {
	for _, v := range b {
		if v != nil {
			return *v
		}
	}
	return false
}

func orTime(t ...time.Time) time.Time {
	for _, v := range t {
		if !v.IsZero() {
			return v
		}
	}
	return time.Time{}
}

func (w wireInput) input() Input {
	in := Input{
		Description: w.Description, IsRequired: orBool(w.IsRequired, w.IsRequired2), Format: w.Format,
		Value: w.Value, IsSecret: orBool(w.IsSecret, w.IsSecret2), Default: w.Default,
		Placeholder: w.Placeholder, Choices: w.Choices,
	}
	if len(w.Variables) > 0 {
		in.Variables = make(map[string]Input, len(w.Variables))
		for k, v := range w.Variables {
			in.Variables[k] = v.input()
		}
	}
	return in
}

func keyValues(ws []wireKeyValue) []KeyValueInput {
	out := make([]KeyValueInput, 0, len(ws))
	for _, w := range ws {
		out = append(out, KeyValueInput{Input: w.input(), Name: w.Name})
	}
	return out
}

func arguments(ws []wireArgument) []Argument {
	out := make([]Argument, 0, len(ws))
	for _, w := range ws {
		out = append(out, Argument{
			Input: w.input(), Type: w.Type, Name: w.Name,
			ValueHint: or(w.ValueHint, w.ValueHintOld), IsRepeated: orBool(w.IsRepeated, w.IsRepeatedOld),
		})
	}
	return out
}

func (w wireRemote) remote() Remote {
	r := Remote{Type: w.Type, URL: w.URL, Headers: keyValues(w.Headers)}
	if len(w.Variables) > 0 {
		r.Variables = make(map[string]Input, len(w.Variables))
		for k, v := range w.Variables {
			r.Variables[k] = v.input()
		}
	}
	return r
}

func firstArgs(a, b []wireArgument) []wireArgument {
	if len(a) > 0 {
		return a
	}
	return b
}

func (w wireServer) server() ServerJSON {
	s := ServerJSON{
		Name: w.Name, Title: w.Title, Description: w.Description, Version: w.Version,
		WebsiteURL: or(w.WebsiteURL, w.WebsiteURLOld), Repository: w.Repository,
	}
	for _, p := range w.Packages {
		env := p.EnvironmentVariables
		if len(env) == 0 {
			env = p.EnvironmentVariablesOld
		}
		s.Packages = append(s.Packages, Package{
			RegistryType:         or(p.RegistryType, p.RegistryTypeOld),
			RegistryBaseURL:      or(p.RegistryBaseURL, p.RegistryBaseURLOld),
			Identifier:           p.Identifier,
			Version:              p.Version,
			FileSHA256:           or(p.FileSHA256, p.FileSHA256Old),
			RuntimeHint:          or(p.RuntimeHint, p.RuntimeHintOld),
			Transport:            p.Transport.remote(),
			RuntimeArguments:     arguments(firstArgs(p.RuntimeArguments, p.RuntimeArgumentsOld)),
			PackageArguments:     arguments(firstArgs(p.PackageArguments, p.PackageArgumentsOld)),
			EnvironmentVariables: keyValues(env),
		})
	}
	for _, r := range w.Remotes {
		s.Remotes = append(s.Remotes, r.remote())
	}
	return s
}

// parseEntry reads one ServerResponse. Registries before the server/_meta
// split sent the server.json fields at the top level with _meta inside.
func parseEntry(raw json.RawMessage) (OfficialEntry, error) {
	var we wireEntry
	if err := json.Unmarshal(raw, &we); err != nil {
		return OfficialEntry{}, err
	}
	serverRaw := we.Server
	meta := we.Meta
	if len(serverRaw) == 0 || string(serverRaw) == "null" {
		serverRaw = raw
	}
	var ws wireServer
	if err := json.Unmarshal(serverRaw, &ws); err != nil {
		return OfficialEntry{}, err
	}
	e := OfficialEntry{Server: ws.server(), Status: ws.Status, IsLatest: true}
	if m, ok := meta[OfficialMetaKey]; ok {
		var wm wireOfficialMeta
		if err := json.Unmarshal(m, &wm); err != nil {
			return OfficialEntry{}, fmt.Errorf("_meta: %w", err)
		}
		if wm.Status != "" {
			e.Status = wm.Status
		}
		e.PublishedAt = orTime(wm.PublishedAt, wm.PublishedAtOld)
		e.UpdatedAt = orTime(wm.UpdatedAt, wm.UpdatedAtOld)
		if wm.IsLatest != nil || wm.IsLatestOld != nil {
			e.IsLatest = orBool(wm.IsLatest, wm.IsLatestOld)
		}
	}
	return e, nil
}

// ParseOfficialList decodes a GET /v0.1/servers body.
func ParseOfficialList(body []byte) (*OfficialList, error) {
	var wl wireList
	if err := json.Unmarshal(body, &wl); err != nil {
		return nil, err
	}
	if wl.Servers == nil {
		return nil, fmt.Errorf("no servers array")
	}
	out := &OfficialList{
		NextCursor: or(wl.Metadata.NextCursor, wl.Metadata.NextCursorOld),
		Count:      wl.Metadata.Count,
		Servers:    make([]OfficialEntry, 0, len(wl.Servers)),
	}
	// One unreadable entry is left out rather than failing the page: anyone
	// can publish, and one entry must not take every search it matches.
	// A page of nothing but unreadable entries is a broken registry.
	var first error
	for i, raw := range wl.Servers {
		e, err := parseEntry(raw)
		if err != nil {
			out.Skipped++
			if first == nil {
				first = fmt.Errorf("servers[%d]: %w", i, err)
			}
			continue
		}
		out.Servers = append(out.Servers, e)
	}
	if len(out.Servers) == 0 && first != nil {
		return nil, first
	}
	return out, nil
}

// ParseOfficialEntry decodes a GET /v0.1/servers/{name}/versions/{version} body.
func ParseOfficialEntry(body []byte) (*OfficialEntry, error) {
	e, err := parseEntry(body)
	if err != nil {
		return nil, err
	}
	if e.Server.Name == "" {
		return nil, fmt.Errorf("entry has no server name")
	}
	return &e, nil
}

// ListParams are the query parameters of GET /v0.1/servers.
type ListParams struct {
	Search string
	// Limit is the page size (the registry caps it at 100).
	Limit  int
	Cursor string
	// Version filters versions: "latest" or an exact version.
	Version string
	// UpdatedSince returns only entries updated after it (deleted ones included).
	UpdatedSince time.Time
}

// officialListURL builds GET {base}/v0.1/servers?… .
func officialListURL(base *url.URL, p ListParams) string {
	u := base.JoinPath("v0.1", "servers")
	q := url.Values{}
	if p.Search != "" {
		q.Set("search", p.Search)
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	if p.Version != "" {
		q.Set("version", p.Version)
	}
	if !p.UpdatedSince.IsZero() {
		q.Set("updated_since", p.UpdatedSince.UTC().Format(time.RFC3339Nano))
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// officialGetURL builds GET {base}/v0.1/servers/{name}/versions/{version};
// the name's '/' is sent as %2F, as the API requires.
func officialGetURL(base *url.URL, name, version string) string {
	u := *base
	basePath := strings.TrimSuffix(u.Path, "/")
	baseRaw := strings.TrimSuffix(u.EscapedPath(), "/")
	u.Path = basePath + "/v0.1/servers/" + name + "/versions/" + version
	u.RawPath = baseRaw + "/v0.1/servers/" + url.PathEscape(name) + "/versions/" + url.PathEscape(version)
	u.RawQuery = ""
	return u.String()
}

// OfficialClient talks to an Official MCP Registry (or a private
// sub-registry speaking the same API).
type OfficialClient struct {
	base *url.URL
	http *fetcher
}

// NewOfficialClient returns a client of the registry at baseURL
// (e.g. https://registry.modelcontextprotocol.io); hc nil uses a default client.
func NewOfficialClient(baseURL string, hc *http.Client) (*OfficialClient, error) {
	u, err := parseBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	return &OfficialClient{base: u, http: newFetcher(SourceOfficialLabel, hc, nil)}, nil
}

// List fetches one page of GET /v0.1/servers. Entries are returned as the
// registry sent them (inactive ones included).
func (c *OfficialClient) List(ctx context.Context, p ListParams) (*OfficialList, error) {
	body, err := c.http.get(ctx, officialListURL(c.base, p))
	if err != nil {
		return nil, err
	}
	l, err := ParseOfficialList(body)
	if err != nil {
		return nil, malformed(SourceOfficialLabel, err)
	}
	return l, nil
}

// Get fetches one version ("latest" when empty) of a server.
func (c *OfficialClient) Get(ctx context.Context, name, version string) (*OfficialEntry, error) {
	if version == "" {
		version = "latest"
	}
	body, err := c.http.get(ctx, officialGetURL(c.base, name, version))
	if err != nil {
		return nil, err
	}
	e, err := ParseOfficialEntry(body)
	if err != nil {
		return nil, malformed(SourceOfficialLabel, err)
	}
	return e, nil
}

func malformed(source string, err error) *apierr.Error {
	return apierr.Wrap(apierr.ServiceUnavailable, source+" answered with malformed JSON", err)
}
