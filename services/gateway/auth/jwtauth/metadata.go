package jwtauth

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// MetadataPath is the RFC 9728 well-known path; the metadata of a resource
// with a path (/mcp) is at MetadataPath + that path.
const MetadataPath = "/.well-known/oauth-protected-resource"

// buildMetadata makes the protected resource metadata and where it is served.
func (v *Verifier) buildMetadata() error {
	u, err := url.Parse(v.opts.Resource)
	if err != nil {
		return fmt.Errorf("--oauth-resource: %w", err)
	}
	suffix := strings.TrimRight(u.Path, "/")
	v.metaURL = u.Scheme + "://" + u.Host + MetadataPath + suffix
	// The path-suffixed document is the one RFC 9728 derives from the
	// resource; the bare one is served as well for clients that ask there
	// first (MCP's fallback order).
	v.paths = []string{MetadataPath}
	if suffix != "" {
		v.paths = append(v.paths, MetadataPath+suffix)
	}
	v.meta = &oauthex.ProtectedResourceMetadata{
		Resource:               v.opts.Resource,
		AuthorizationServers:   v.opts.Issuers,
		ScopesSupported:        v.scopes.Supported(),
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "mcpbus gateway",
	}
	return nil
}

// Metadata is the RFC 9728 document.
func (v *Verifier) Metadata() *oauthex.ProtectedResourceMetadata { return v.meta }

// MetadataURL is where the document of the resource is: the
// resource_metadata of every challenge.
func (v *Verifier) MetadataURL() string { return v.metaURL }

// MetadataPaths are the gateway paths that serve the document.
func (v *Verifier) MetadataPaths() []string { return v.paths }

// MetadataHandler serves the document (GET, with CORS for any origin:
// the metadata is public, and browser clients discover it cross-origin).
func (v *Verifier) MetadataHandler() http.Handler {
	return sdkauth.ProtectedResourceMetadataHandler(v.meta)
}
