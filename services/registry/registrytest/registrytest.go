// Package registrytest runs local HTTP servers that speak the Official MCP
// Registry API (GET /v0.1/servers, GET /v0.1/servers/{name}/versions/{version})
// and Smithery's registry API (GET /servers, GET /servers/{qualifiedName}),
// fed with recorded entries, for tests of the registry service and its users.
// Faults (status codes, delays, malformed bodies) can be switched on.
package registrytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Fault changes every answer of a fake registry.
type Fault struct {
	// Status, when set, is answered instead of the real answer.
	Status int
	// Delay comes before the answer (cut short when the client gives up).
	Delay time.Duration
	// Body, when set, is sent with status 200 instead of the real answer.
	Body string
	// Respond, when set, answers instead (a hostile registry whose answer
	// depends on the request).
	Respond http.HandlerFunc
}

type fake struct {
	mu       sync.Mutex
	fault    Fault
	requests atomic.Int64
	queries  []string
}

// SetFault switches a fault on (Fault{} switches it off).
func (f *fake) SetFault(fault Fault) {
	f.mu.Lock()
	f.fault = fault
	f.mu.Unlock()
}

// Requests counts the requests served so far.
func (f *fake) Requests() int64 { return f.requests.Load() }

// Queries lists the request URIs (path and query) served so far.
func (f *fake) Queries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.queries...)
}

// faulted applies the fault; it reports true when it answered.
func (f *fake) faulted(w http.ResponseWriter, r *http.Request) bool {
	f.requests.Add(1)
	f.mu.Lock()
	fault := f.fault
	f.queries = append(f.queries, r.URL.RequestURI())
	f.mu.Unlock()
	if fault.Delay > 0 {
		select {
		case <-time.After(fault.Delay):
		case <-r.Context().Done():
			return true
		}
	}
	switch {
	case fault.Respond != nil:
		fault.Respond(w, r)
		return true
	case fault.Status != 0:
		writeJSON(w, fault.Status, map[string]string{"error": http.StatusText(fault.Status)})
		return true
	case fault.Body != "":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(fault.Body))
		return true
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// --- Official MCP Registry ---

// Official is a fake Official MCP Registry.
type Official struct {
	*httptest.Server
	fake
	entries []officialEntry // by name, then publication
}

type officialEntry struct {
	raw       json.RawMessage
	name      string
	version   string
	status    string
	isLatest  bool
	updatedAt time.Time
}

// LoadOfficial reads the servers of a ServerList file (servers[] entries of
// {server, _meta}).
func LoadOfficial(path string) ([]json.RawMessage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var l struct {
		Servers []json.RawMessage `json:"servers"`
	}
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l.Servers, nil
}

// NewOfficial serves entries (ServerResponse JSON, camelCase or snake_case).
func NewOfficial(entries []json.RawMessage) (*Official, error) {
	o := &Official{}
	for i, raw := range entries {
		var e struct {
			Server struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"server"`
			Meta map[string]struct {
				Status       string    `json:"status"`
				IsLatest     *bool     `json:"isLatest"`
				IsLatestOld  *bool     `json:"is_latest"`
				UpdatedAt    time.Time `json:"updatedAt"`
				UpdatedAtOld time.Time `json:"updated_at"`
			} `json:"_meta"`
		}
		if err := json.Unmarshal(raw, &e); err != nil || e.Server.Name == "" {
			return nil, fmt.Errorf("entry %d is not a ServerResponse: %v", i, err)
		}
		m := e.Meta["io.modelcontextprotocol.registry/official"]
		oe := officialEntry{raw: raw, name: e.Server.Name, version: e.Server.Version, status: m.Status, isLatest: true, updatedAt: m.UpdatedAt}
		if m.IsLatest != nil {
			oe.isLatest = *m.IsLatest
		} else if m.IsLatestOld != nil {
			oe.isLatest = *m.IsLatestOld
		}
		if oe.updatedAt.IsZero() {
			oe.updatedAt = m.UpdatedAtOld
		}
		o.entries = append(o.entries, oe)
	}
	sort.SliceStable(o.entries, func(i, j int) bool { return o.entries[i].name < o.entries[j].name })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v0.1/servers", o.list)
	mux.HandleFunc("GET /v0.1/servers/{name}/versions/{version}", o.get)
	o.Server = httptest.NewServer(mux)
	return o, nil
}

func (e officialEntry) cursor() string { return e.name + ":" + e.version }

// list is GET /v0.1/servers: search is a case-insensitive substring of the
// name, version=latest keeps the latest versions, the cursor is the
// name:version of the last entry of the previous page.
func (o *Official) list(w http.ResponseWriter, r *http.Request) {
	if o.faulted(w, r) {
		return
	}
	q := r.URL.Query()
	limit := 30
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": "limit must be between 1 and 100"})
			return
		}
		limit = n
	}
	var since time.Time
	if v := q.Get("updated_since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "updated_since must be RFC 3339"})
			return
		}
		since = t
	}
	search := strings.ToLower(q.Get("search"))
	version := q.Get("version")
	cursor := q.Get("cursor")
	started := cursor == ""
	var page []json.RawMessage
	next := ""
	for _, e := range o.entries {
		if !started {
			started = e.cursor() == cursor
			continue
		}
		switch {
		case search != "" && !strings.Contains(strings.ToLower(e.name), search):
			continue
		case version == "latest" && !e.isLatest:
			continue
		case version != "" && version != "latest" && e.version != version:
			continue
		case !since.IsZero() && !e.updatedAt.After(since):
			continue
		case since.IsZero() && e.status == "deleted" && q.Get("include_deleted") != "true":
			continue
		}
		if len(page) == limit {
			next = o.lastCursor(page)
			break
		}
		page = append(page, e.raw)
	}
	if page == nil {
		page = []json.RawMessage{}
	}
	meta := map[string]any{"count": len(page)}
	if next != "" {
		meta["nextCursor"] = next
	}
	writeJSON(w, http.StatusOK, map[string]any{"servers": page, "metadata": meta})
}

func (o *Official) lastCursor(page []json.RawMessage) string {
	var e struct {
		Server struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"server"`
	}
	_ = json.Unmarshal(page[len(page)-1], &e)
	return e.Server.Name + ":" + e.Server.Version
}

// get is GET /v0.1/servers/{name}/versions/{version}; version may be latest.
func (o *Official) get(w http.ResponseWriter, r *http.Request) {
	if o.faulted(w, r) {
		return
	}
	name, version := r.PathValue("name"), r.PathValue("version")
	for _, e := range o.entries {
		if e.name == name && (e.version == version || (version == "latest" && e.isLatest)) && e.status != "deleted" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(e.raw)
			return
		}
	}
	writeJSON(w, http.StatusNotFound, map[string]string{"error": "Server not found"})
}

// --- Smithery ---

// Smithery is a fake Smithery registry API.
type Smithery struct {
	*httptest.Server
	fake
	rows    []smitheryRow
	details map[string]json.RawMessage
	// apiKey, when set, must come as "Authorization: Bearer <key>" (else 401).
	apiKey string
}

type smitheryRow struct {
	raw  json.RawMessage
	text string // qualifiedName, displayName and description, lower case
}

// SmitheryData is the content of a Smithery fixture file.
type SmitheryData struct {
	List struct {
		Servers []json.RawMessage `json:"servers"`
	} `json:"list"`
	Details map[string]json.RawMessage `json:"details"`
}

// LoadSmithery reads a Smithery fixture file ({list:{servers}, details:{name: detail}}).
func LoadSmithery(path string) (*SmitheryData, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d SmitheryData
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &d, nil
}

// Merge adds other's rows and details to d.
func (d *SmitheryData) Merge(other *SmitheryData) {
	d.List.Servers = append(d.List.Servers, other.List.Servers...)
	if d.Details == nil {
		d.Details = map[string]json.RawMessage{}
	}
	for k, v := range other.Details {
		d.Details[k] = v
	}
}

// NewSmithery serves the rows and details; apiKey "" accepts any caller.
func NewSmithery(data *SmitheryData, apiKey string) (*Smithery, error) {
	s := &Smithery{details: data.Details, apiKey: apiKey}
	for i, raw := range data.List.Servers {
		var row struct {
			QualifiedName string `json:"qualifiedName"`
			DisplayName   string `json:"displayName"`
			Description   string `json:"description"`
		}
		if err := json.Unmarshal(raw, &row); err != nil || row.QualifiedName == "" {
			return nil, fmt.Errorf("row %d is not a Smithery server: %v", i, err)
		}
		s.rows = append(s.rows, smitheryRow{raw: raw, text: strings.ToLower(row.QualifiedName + " " + row.DisplayName + " " + row.Description)})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /servers", s.list)
	mux.HandleFunc("GET /servers/{name...}", s.get)
	s.Server = httptest.NewServer(mux)
	return s, nil
}

func (s *Smithery) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.apiKey != "" && r.Header.Get("Authorization") != "Bearer "+s.apiKey {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
		return false
	}
	return true
}

// list is GET /servers?q=&page=&pageSize=: q is a case-insensitive
// substring of the name, display name or description.
func (s *Smithery) list(w http.ResponseWriter, r *http.Request) {
	if s.faulted(w, r) || !s.authorized(w, r) {
		return
	}
	q := r.URL.Query()
	page, size := 1, 10
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad page"})
			return
		}
		page = n
	}
	if v := q.Get("pageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad pageSize"})
			return
		}
		size = n
	}
	needle := strings.ToLower(strings.TrimSpace(q.Get("q")))
	var hits []json.RawMessage
	for _, row := range s.rows {
		if needle == "" || strings.Contains(row.text, needle) {
			hits = append(hits, row.raw)
		}
	}
	total := len(hits)
	start := min((page-1)*size, total)
	end := min(start+size, total)
	servers := hits[start:end]
	if servers == nil {
		servers = []json.RawMessage{}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"servers": servers,
		"pagination": map[string]int{
			"currentPage": page, "pageSize": size, "totalPages": (total + size - 1) / size, "totalCount": total,
		},
	})
}

// get is GET /servers/{qualifiedName}.
func (s *Smithery) get(w http.ResponseWriter, r *http.Request) {
	if s.faulted(w, r) || !s.authorized(w, r) {
		return
	}
	if d, ok := s.details[r.PathValue("name")]; ok {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(d)
		return
	}
	writeJSON(w, http.StatusNotFound, map[string]string{"error": "Server not found"})
}
