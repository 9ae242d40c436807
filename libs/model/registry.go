package model

// Wire types of the registry service (services/registry):
//
//	mcp.v1.registry.search  RegistrySearchRequest → RegistrySearchReply
//	mcp.v1.registry.get     RegistryGetRequest    → InstallPlan
//
// Errors are the usual contract: VALIDATION_ERROR for bad requests,
// NOT_FOUND for an unknown server or one with nothing this host can run,
// UNAUTHORIZED when Smithery refuses the API key, NETWORK_ERROR or
// SERVICE_UNAVAILABLE when no registry answered.

// Registry names: the sources of search results and install plans.
const (
	RegistryOfficial = SourceOfficial
	RegistrySmithery = SourceSmithery
	RegistryBoth     = "both"
)

// Limits of registry requests.
const (
	MaxRegistryQueryLen     = 200
	MaxRegistryPageSize     = 100
	DefaultRegistryPageSize = 20
	// MaxRegistryResults bounds page × page_size: deeper pages would make the
	// service walk too many registry pages per request.
	MaxRegistryResults = 1000
)

// RegistrySearchRequest is the body of mcp.v1.registry.search.
type RegistrySearchRequest struct {
	Query string `json:"query"`
	// Registry is official, smithery or both (default both).
	Registry string `json:"registry,omitempty"`
	// Page is 1-based (default 1); PageSize defaults to 20, at most 100.
	Page     int `json:"page,omitempty"`
	PageSize int `json:"page_size,omitempty"`
}

// RegistrySearchReply is one page of the merged, ranked results.
type RegistrySearchReply struct {
	Results  []RegistryResult `json:"results"`
	Page     int              `json:"page"`
	PageSize int              `json:"page_size"`
	// Total counts the merged results fetched for the query; with HasMore set
	// the registries hold more than that.
	Total   int  `json:"total"`
	HasMore bool `json:"has_more"`
	// Stale is set when some results come from an expired cache entry because
	// their registry did not answer.
	Stale bool `json:"stale,omitempty"`
	// Warnings name the sources that failed (the others' results are still here).
	Warnings []RegistryWarning `json:"warnings,omitempty"`
}

// RegistryWarning reports a source that failed or was served from cache.
type RegistryWarning struct {
	Source  string `json:"source"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// RegistryResult is one server, possibly known to both registries (merged by
// normalized name).
type RegistryResult struct {
	// Name is the Official Registry name (io.github.owner/server) when the
	// server is listed there, else the Smithery qualified name.
	Name string `json:"name"`
	// QualifiedName is the Smithery qualified name when Smithery lists it.
	QualifiedName string `json:"qualified_name,omitempty"`
	Title         string `json:"title,omitempty"`
	Description   string `json:"description,omitempty"`
	// Version is the latest version in the Official Registry.
	Version string `json:"version,omitempty"`
	// Sources are the badges: "official", "smithery" or both.
	Sources []string `json:"sources"`
	// Verified: Smithery's verified flag, or listed in the Official Registry
	// (which authenticates the publisher of every namespace).
	Verified bool `json:"verified"`
	// UseCount is Smithery's popularity figure (0 when unknown).
	UseCount int64 `json:"use_count"`
	// Remote is set when a hosted endpoint exists.
	Remote   bool   `json:"remote,omitempty"`
	Homepage string `json:"homepage,omitempty"`
	IconURL  string `json:"icon_url,omitempty"`
	Stale    bool   `json:"stale,omitempty"`
}

// GetRequest is the request that fetches this result's install plan,
// preferring the Official Registry entry (it carries the package data).
func (r RegistryResult) GetRequest() RegistryGetRequest {
	for _, s := range r.Sources {
		if s == RegistryOfficial {
			return RegistryGetRequest{Name: r.Name, Registry: RegistryOfficial}
		}
	}
	name := r.QualifiedName
	if name == "" {
		name = r.Name
	}
	return RegistryGetRequest{Name: name, Registry: RegistrySmithery}
}

// RegistryGetRequest is the body of mcp.v1.registry.get.
type RegistryGetRequest struct {
	// Name is the Official Registry name or the Smithery qualified name.
	Name string `json:"name"`
	// Registry is official or smithery; when empty it is inferred from the
	// name (reverse-DNS namespace → official).
	Registry string `json:"registry,omitempty"`
	// Version of an Official Registry entry (default latest).
	Version string `json:"version,omitempty"`
	// Variables give values to the plan's inputs (package arguments, {var}
	// placeholders, non-secret env vars, headers and config fields), by input
	// name. Secrets never go here: they belong in config.create's secrets.
	Variables map[string]string `json:"variables,omitempty"`
	// Prefer picks a package type (npm, docker or http) when it is runnable.
	Prefer string `json:"prefer,omitempty"`
}

// InstallPlan says how to run a registry entry on this host and what the
// user must supply. Draft, when set, is accepted by mcp.v1.config.create as
// it is, together with the secrets named in Credentials.
type InstallPlan struct {
	Source        string `json:"source"`
	Name          string `json:"name"`
	QualifiedName string `json:"qualified_name,omitempty"`
	Version       string `json:"version,omitempty"`
	Title         string `json:"title,omitempty"`
	Description   string `json:"description,omitempty"`
	// Package is the chosen way to run the server.
	Package PlanPackage `json:"package"`
	// Options lists every package, remote or connection of the entry, with
	// the reason it could not be used on this host.
	Options []PlanOption `json:"options"`
	// Credentials are the secrets the server needs (none of their values).
	Credentials []PlanCredential `json:"credentials"`
	// Inputs are the non-secret values of the chosen package: arguments,
	// {var} placeholders, env vars, headers and config fields, with the value
	// the plan uses.
	Inputs []PlanInput `json:"inputs"`
	// Missing names the required inputs that have no value yet: give them in
	// the request's variables. Draft is set only when nothing is missing.
	Missing []string `json:"missing,omitempty"`
	// AuthType is the detected auth type: oauth for a *_CLIENT_ID and
	// *_CLIENT_SECRET pair, api_key for any other secret, none without one.
	AuthType string     `json:"auth_type"`
	Ready    bool       `json:"ready"`
	Draft    *McpConfig `json:"draft,omitempty"`
	// Tools are the tools a registry lists for the server (Smithery).
	Tools    []PlanTool `json:"tools,omitempty"`
	Warnings []string   `json:"warnings,omitempty"`
	Stale    bool       `json:"stale,omitempty"`
}

// PlanPackage is the chosen package or remote.
type PlanPackage struct {
	// Type is the McpConfig package type: npm, docker or http.
	Type string `json:"type"`
	// RegistryType is what the registry called it: npm, oci, streamable-http, http.
	RegistryType string `json:"registry_type"`
	Identifier   string `json:"identifier"`
	Version      string `json:"version,omitempty"`
	RuntimeHint  string `json:"runtime_hint,omitempty"`
	// Args are the package arguments (after the package or image).
	Args []string `json:"args,omitempty"`
	// RuntimeArgs are arguments of the runtime (docker run flags before the
	// image, npx flags before the package); the draft carries them in
	// package.runtime_args.
	RuntimeArgs []string `json:"runtime_args,omitempty"`
	URL         string   `json:"url,omitempty"`
	// Headers are the non-secret headers of a remote.
	Headers map[string]string `json:"headers,omitempty"`
}

// PlanOption is one way the registry offers to run the server.
type PlanOption struct {
	// Kind is package, remote or connection (Smithery).
	Kind       string `json:"kind"`
	Type       string `json:"type"`
	Identifier string `json:"identifier,omitempty"`
	Usable     bool   `json:"usable"`
	Chosen     bool   `json:"chosen,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// Credential kinds.
const (
	CredentialEnv    = "env"
	CredentialHeader = "header"
	// CredentialConfig is a secret field of a Smithery config schema that
	// Smithery's gateway reads from the connection URL's query.
	CredentialConfig = "config"
)

// PlanCredential is one secret the server needs: an env var (config.create
// secrets.env) or a header (secrets.headers).
type PlanCredential struct {
	Kind        string `json:"kind"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required"`
	// Template shows the expected form when the registry gives one, e.g.
	// "Bearer {token}" (no secret in it).
	Template string `json:"template,omitempty"`
}

// Input kinds.
const (
	InputArgument = "argument"
	InputVariable = "variable"
	InputEnv      = "env"
	InputHeader   = "header"
	InputConfig   = "config"
)

// PlanInput is one non-secret value of the plan.
type PlanInput struct {
	Name        string   `json:"name"`
	Kind        string   `json:"kind"`
	Description string   `json:"description,omitempty"`
	Required    bool     `json:"required"`
	Format      string   `json:"format,omitempty"`
	Default     string   `json:"default,omitempty"`
	Choices     []string `json:"choices,omitempty"`
	// Value is what the plan uses (from variables, the registry's value or its
	// default); empty when not set.
	Value string `json:"value,omitempty"`
}

// PlanTool is a tool a registry lists for the server.
type PlanTool struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// RegistryCredentialsID is the credential record that holds the registries'
// own keys (env SMITHERY_API_KEY): `mcpbus cred set-registry-key smithery`
// writes it, the registry service resolves it. A fixed uuid (v5 of
// "mcpbus:registry-credentials") so every instance finds the same record.
const RegistryCredentialsID = "3dec35ba-9ae9-5edf-a6e6-3d85248d889c"

// SmitheryKeyEnv is the variable of the Smithery key, in the environment of
// the registry service or in the record RegistryCredentialsID.
const SmitheryKeyEnv = "SMITHERY_API_KEY"
