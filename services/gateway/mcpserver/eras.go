package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbus/mcpbus/libs/jsonscan"
)

// The two eras of the protocol on one endpoint. Clients up to 2025-11-25
// open a session with initialize and are served by go-sdk's stateful
// handler; clients of 2026-07-28 (SEP-2575) send every request on its own,
// with the protocol version, client info and capabilities in its _meta and
// the MCP-Protocol-Version, Mcp-Method and Mcp-Name headers, and are served
// by go-sdk's stateless handler. Each answer carries only the fields of the
// client's era: results of older sessions lose the fields 2026-07-28 added
// (ttlMs, cacheScope, resultType), and a tool's result loses the protocol
// fields of the upstream server's own session with its runner.

// modernVersion is the first protocol version without sessions (SEP-2575).
const modernVersion = "2026-07-28"

// modernRequest reports whether r speaks protocol 2026-07-28 or later: by
// its MCP-Protocol-Version header, or by the protocol version in the _meta
// of its request (go-sdk then checks that both agree), or because it is
// server/discover, which only that protocol has (go-sdk answers it -32601
// to an older client).
func modernRequest(r *http.Request, msg jsonrpc.Message) bool {
	if r.Header.Get("Mcp-Protocol-Version") >= modernVersion {
		return true
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return false
	}
	if req.Method == "server/discover" {
		return true
	}
	// Without the key's text and without an escape (JSON may spell the key
	// with \/ or \u), its params cannot hold it: no decode (a call of a
	// session would decode them twice, here and on the fast path).
	if !bytes.Contains(req.Params, []byte(mcp.MetaKeyProtocolVersion)) && !bytes.Contains(req.Params, []byte{'\\'}) {
		return false
	}
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(req.Params, &p) != nil {
		return false
	}
	_, ok = p.Meta[mcp.MetaKeyProtocolVersion]
	return ok
}

// modernEra reports whether req is of protocol 2026-07-28 or later: it
// names its protocol version in its _meta (SEP-2575), the test go-sdk makes
// before it adds the fields of that era. The version a session's initialize
// proposed does not count: initialize settles on 2025-11-25 at most, so a
// client that proposed 2026-07-28 (or a newer version) speaks 2025-11-25.
func modernEra(req mcp.Request) bool {
	p := req.GetParams()
	if p == nil {
		return false
	}
	if v := reflect.ValueOf(p); v.Kind() == reflect.Pointer && v.IsNil() {
		return false // no params: no _meta (go-sdk passes a typed nil)
	}
	_, ok := p.GetMeta()[mcp.MetaKeyProtocolVersion]
	return ok
}

// forEra adapts the result of req to the client's era. An older client gets
// go-sdk's list and read results without the cache hints of 2026-07-28
// (ttlMs, cacheScope: go-sdk always encodes them), and results decoded from
// an upstream of 2026-07-28 without its resultType. Each is encoded once, as
// the plain struct (without go-sdk's MarshalJSON, which adds resultType) with
// the hints shadowed by omitted fields. A client of 2026-07-28 gets the
// resultType its era requires of every result on the results go-sdk leaves
// without one: those of resources/read and prompts/get, which go-sdk types
// only in its own handlers, and the gateway answers them itself.
func forEra(req mcp.Request, res mcp.Result) mcp.Result {
	if res == nil {
		return res
	}
	if modernEra(req) {
		switch r := res.(type) {
		case *mcp.ReadResourceResult:
			return completeRead{r}
		case *mcp.GetPromptResult:
			return completePrompt{r}
		}
		return res
	}
	switch r := res.(type) {
	case *mcp.ListToolsResult:
		return legacyTools{r}
	case *mcp.ListPromptsResult:
		return legacyPrompts{r}
	case *mcp.ListResourcesResult:
		return legacyResources{r}
	case *mcp.ListResourceTemplatesResult:
		return legacyTemplates{r}
	case *mcp.ReadResourceResult:
		return legacyRead{r}
	case *mcp.GetPromptResult:
		return legacyPrompt{r}
	case *mcp.CallToolResult:
		// go-sdk types it by the version initialize proposed, not the one
		// it settled on.
		return legacyCall{r}
	}
	return res
}

// completeType is the resultType of a final result (2026-07-28): it shadows
// the one go-sdk's MarshalJSON would take from an upstream's result.
type completeType struct {
	ResultType string `json:"resultType"`
}

var complete = completeType{ResultType: "complete"}

type completeRead struct{ *mcp.ReadResourceResult }

func (r completeRead) MarshalJSON() ([]byte, error) {
	type plain mcp.ReadResourceResult
	return json.Marshal(struct {
		*plain
		completeType
	}{(*plain)(r.ReadResourceResult), complete})
}

type completePrompt struct{ *mcp.GetPromptResult }

func (r completePrompt) MarshalJSON() ([]byte, error) {
	type plain mcp.GetPromptResult
	return json.Marshal(struct {
		*plain
		completeType
	}{(*plain)(r.GetPromptResult), complete})
}

// cacheless shadows the cache hints of the result it is embedded beside:
// nil, so omitted.
type cacheless struct {
	TTLMs      *int    `json:"ttlMs,omitempty"`
	CacheScope *string `json:"cacheScope,omitempty"`
}

type legacyTools struct{ *mcp.ListToolsResult }

func (r legacyTools) MarshalJSON() ([]byte, error) {
	type plain mcp.ListToolsResult
	return json.Marshal(struct {
		*plain
		cacheless
	}{plain: (*plain)(r.ListToolsResult)})
}

type legacyPrompts struct{ *mcp.ListPromptsResult }

func (r legacyPrompts) MarshalJSON() ([]byte, error) {
	type plain mcp.ListPromptsResult
	return json.Marshal(struct {
		*plain
		cacheless
	}{plain: (*plain)(r.ListPromptsResult)})
}

type legacyResources struct{ *mcp.ListResourcesResult }

func (r legacyResources) MarshalJSON() ([]byte, error) {
	type plain mcp.ListResourcesResult
	return json.Marshal(struct {
		*plain
		cacheless
	}{plain: (*plain)(r.ListResourcesResult)})
}

type legacyTemplates struct {
	*mcp.ListResourceTemplatesResult
}

func (r legacyTemplates) MarshalJSON() ([]byte, error) {
	type plain mcp.ListResourceTemplatesResult
	return json.Marshal(struct {
		*plain
		cacheless
	}{plain: (*plain)(r.ListResourceTemplatesResult)})
}

type legacyRead struct{ *mcp.ReadResourceResult }

func (r legacyRead) MarshalJSON() ([]byte, error) {
	type plain mcp.ReadResourceResult
	return json.Marshal(struct {
		*plain
		cacheless
	}{plain: (*plain)(r.ReadResourceResult)})
}

type legacyPrompt struct{ *mcp.GetPromptResult }

func (r legacyPrompt) MarshalJSON() ([]byte, error) {
	type plain mcp.GetPromptResult
	return json.Marshal((*plain)(r.GetPromptResult))
}

type legacyCall struct{ *mcp.CallToolResult }

func (r legacyCall) MarshalJSON() ([]byte, error) {
	type plain mcp.CallToolResult
	return json.Marshal((*plain)(r.CallToolResult))
}

// dropUpstreamInfo removes the upstream server's serverInfo from the _meta
// of a result relayed from it: the client's server is the gateway.
func dropUpstreamInfo(m mcp.Meta) { delete(m, mcp.MetaKeyServerInfo) }

// privateCache is the cache scope of every list and read result: what a
// client sees depends on its key's tool filter, so no shared cache may keep it.
const privateCache = "private"

// eraResult rewrites a tool's result, as its server wrote it, for the
// client: the upstream's own protocol fields (its resultType, whatever it
// says, and its serverInfo in _meta) are dropped, and with serverInfo (a 2026-07-28
// client) resultType "complete" and the gateway's serverInfo are added, as
// go-sdk adds them to its own results. A result without those fields is
// returned as it is, without decoding it.
func eraResult(raw []byte, serverInfo json.RawMessage) ([]byte, error) {
	// (A key spelled with escapes may name either: escapesLetters.)
	if serverInfo == nil && !bytes.Contains(raw, []byte(`"resultType"`)) && !bytes.Contains(raw, []byte(mcp.MetaKeyServerInfo)) && !escapesLetters(raw) {
		return raw, nil
	}
	if out, ok := spliceEraResult(raw, serverInfo); ok {
		return out, nil
	}
	return decodeEraResult(raw, serverInfo)
}

// spliceEraResult is eraResult in one pass over raw's members, copying
// their bytes: every result of a 2026-07-28 client gets resultType and
// serverInfo, and decoding a result to add two members cost more than the
// rest of the gateway's work on a call. ok is false when raw or its _meta is
// not an object or a key holds an escape (encoding/json would unescape it:
// decodeEraResult decides then).
func spliceEraResult(raw []byte, serverInfo json.RawMessage) (out []byte, ok bool) {
	out = make([]byte, 0, len(raw)+len(serverInfo)+128) // room for both members
	out = append(out, '{')
	var meta []byte // the members of _meta kept, comma-separated
	clean := true
	var seenType, seenMeta bool // twice: decoding keeps the last one
	member := func(dst, key, val []byte) []byte {
		if len(dst) > 1 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, key...)
		dst = append(dst, '"', ':')
		return append(dst, val...)
	}
	meta = append(meta, '{')
	scanned := jsonscan.Members(raw, func(key, val []byte) bool {
		if bytes.IndexByte(key, '\\') >= 0 {
			clean = false
			return false
		}
		switch string(key) {
		case "resultType":
			if seenType {
				clean = false
				return false
			}
			seenType = true
			// The upstream's own, whatever it says: added again below for
			// the client's era. A server's "task" or "input_required" is
			// not the gateway's (the runner fulfils a server's input
			// requests and keeps none of a result's other members, and no
			// task reaches a server), so it would tell the client of a
			// task or of requests that are not there.
			return true
		case "_meta":
			if seenMeta {
				clean = false
				return false
			}
			seenMeta = true
			clean = jsonscan.Members(val, func(k, v []byte) bool {
				if bytes.IndexByte(k, '\\') >= 0 {
					return false
				}
				if string(k) != mcp.MetaKeyServerInfo {
					meta = member(meta, k, v)
				}
				return true
			})
			return clean
		}
		out = member(out, key, val)
		return true
	})
	if !scanned || !clean {
		return nil, false
	}
	if serverInfo != nil {
		out = member(out, []byte("resultType"), []byte(`"complete"`))
		meta = member(meta, []byte(mcp.MetaKeyServerInfo), serverInfo)
	}
	if len(meta) > 1 {
		out = member(out, []byte("_meta"), append(meta, '}'))
	}
	return append(out, '}'), true
}

// decodeEraResult is eraResult by decoding raw: the reference
// spliceEraResult is fuzzed against, and the path of what it declines.
func decodeEraResult(raw []byte, serverInfo json.RawMessage) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, errors.New("the result is not a JSON object")
	}
	delete(fields, "resultType")
	var meta map[string]json.RawMessage
	if m, ok := fields["_meta"]; ok {
		if err := json.Unmarshal(m, &meta); err != nil {
			return nil, errors.New("the result's _meta is not a JSON object")
		}
		delete(meta, mcp.MetaKeyServerInfo)
	}
	if serverInfo != nil {
		fields["resultType"] = json.RawMessage(`"complete"`)
		if meta == nil {
			meta = map[string]json.RawMessage{}
		}
		meta[mcp.MetaKeyServerInfo] = serverInfo
	}
	delete(fields, "_meta")
	if len(meta) > 0 {
		m, err := json.Marshal(meta)
		if err != nil {
			return nil, err
		}
		fields["_meta"] = m
	}
	return json.Marshal(fields)
}
