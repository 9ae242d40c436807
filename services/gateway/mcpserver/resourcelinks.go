package mcpserver

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The URIs a server names in what it returns (a resource_link's uri, an
// embedded resource's resource.uri, in a tool's result or a prompt's
// messages) are its own, as those of its resources/list are: the gateway
// puts them in its namespace (resourceURI) the same way. Otherwise a link
// a client follows with resources/read would find nothing (the gateway
// reads mcpbus:// URIs only), and a server could name another server's
// resource in the gateway's own spelling (mcpbus://other/…), so that a
// client following it reads the other server's data, with the rights of
// its user, into the conversation the first server takes part in. Wrapped
// under the server that named it, such a URI reaches that server again.

// linkedURIs is raw, a CallToolResult of server's, with the URIs of its
// content namespaced. Either content type is spelled "resource…" (a
// client matches it exactly), so a result without `"resource` and without
// a letter spelled as an escape (the common case) names none: it is raw
// itself, found by two scans without decoding. Raw that is not a JSON
// object is left for eraResult to refuse.
func linkedURIs(raw []byte, server string) []byte {
	if !bytes.Contains(raw, []byte(`"resource`)) && !escapesLetters(raw) {
		return raw
	}
	var res map[string]json.RawMessage
	if json.Unmarshal(raw, &res) != nil {
		return raw
	}
	// Keys match as a client's decoder matches them: Go's ignores case.
	// Once a link may be there, the result is written anew from what was
	// decoded, so a key given twice (a decoder may keep either) is left once.
	found := false
	for k, v := range res {
		if !strings.EqualFold(k, "content") {
			continue
		}
		// Item by item: one that is no object (which a lenient client may
		// skip) must not leave the others' links as they were.
		var items []json.RawMessage
		if json.Unmarshal(v, &items) != nil {
			continue
		}
		found = true
		for i, raw := range items {
			var item map[string]json.RawMessage
			if json.Unmarshal(raw, &item) == nil && item != nil {
				namespaceURIs(item, server)
				items[i], _ = json.Marshal(item)
			}
		}
		res[k], _ = json.Marshal(items)
	}
	if !found {
		return raw
	}
	out, err := json.Marshal(res)
	if err != nil {
		return raw
	}
	return out
}

// namespaceURIs namespaces the uri of one content item (a resource_link)
// and that of its resource (an embedded resource), whatever its type says:
// no other content type has either.
func namespaceURIs(item map[string]json.RawMessage, server string) {
	for k, v := range item {
		switch {
		case strings.EqualFold(k, "uri"):
			var uri string
			if json.Unmarshal(v, &uri) == nil && uri != "" {
				item[k], _ = json.Marshal(resourceURI(server, uri))
			}
		case strings.EqualFold(k, "resource"):
			var inner map[string]json.RawMessage
			if json.Unmarshal(v, &inner) == nil && inner != nil {
				namespaceURIs(inner, server)
				item[k], _ = json.Marshal(inner)
			}
		}
	}
}

// escapesLetters reports whether raw spells an ASCII letter or underscore
// as a \u escape (\u0041–\u007a): then "resource" may be in it unseen.
// Go's encoder writes \u003c, \u003e, \u0026 for <, >, &, which are not.
func escapesLetters(raw []byte) bool {
	for {
		i := bytes.Index(raw, []byte(`\u00`))
		if i < 0 || i+4 >= len(raw) {
			return false
		}
		if raw[i+4] >= '4' && raw[i+4] <= '7' {
			return true
		}
		raw = raw[i+4:]
	}
}

// promptURIs namespaces the URIs of a prompt's messages (decoded by
// go-sdk, so by their exact type) as linkedURIs does a tool's.
func promptURIs(res *mcp.GetPromptResult, server string) {
	for _, m := range res.Messages {
		if m == nil {
			continue
		}
		switch c := m.Content.(type) {
		case *mcp.ResourceLink:
			c.URI = resourceURI(server, c.URI)
		case *mcp.EmbeddedResource:
			if c.Resource != nil && c.Resource.URI != "" {
				c.Resource.URI = resourceURI(server, c.Resource.URI)
			}
		}
	}
}
