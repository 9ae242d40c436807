package mcpserver

import (
	"bytes"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	segjson "github.com/segmentio/encoding/json"
)

// decodeMessage is go-sdk's jsonrpc.DecodeMessage for one request, without
// its cost: go-sdk v1.8.0 decodes through a segmentio json.Decoder, which
// allocates a 32 KiB read buffer per message (~73 KB per /mcp call, most of
// the gateway's bytes). This parses the same struct with the same library
// and flags (case-sensitive keys) straight from the body, so a request
// decodes exactly as go-sdk decodes it. Anything that is not plainly a
// request (a response, an error, trailing data, nesting go-sdk refuses) goes
// to jsonrpc.DecodeMessage, which gives go-sdk's own answer or error.
func decodeMessage(data []byte) (jsonrpc.Message, error) {
	if msg := decodeRequest(data); msg != nil {
		return msg, nil
	}
	return jsonrpc.DecodeMessage(data)
}

// wireRequest mirrors go-sdk's internal wireDecode.
type wireRequest struct {
	VersionTag string          `json:"jsonrpc"`
	ID         any             `json:"id,omitempty"`
	Method     json.RawMessage `json:"method"`
	Params     json.RawMessage `json:"params,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      *jsonrpc.Error  `json:"error,omitempty"`
}

// maxDepth is go-sdk's limit on nesting (internal/json).
const maxDepth = 1000

// decodeRequest is the request of data, or nil when decodeMessage must ask
// go-sdk.
func decodeRequest(data []byte) *jsonrpc.Request {
	if tooDeep(data) {
		return nil
	}
	var w wireRequest
	rest, err := segjson.Parse(data, &w, segjson.DontMatchCaseInsensitiveStructFields)
	if err != nil || len(bytes.TrimSpace(rest)) != 0 || w.VersionTag != "2.0" || len(w.Method) == 0 {
		return nil
	}
	id, err := jsonrpc.MakeID(w.ID)
	if err != nil {
		return nil
	}
	var method string
	if _, err := segjson.Parse(w.Method, &method, segjson.DontMatchCaseInsensitiveStructFields); err != nil {
		return nil
	}
	return &jsonrpc.Request{Method: method, ID: id, Params: w.Params}
}

// tooDeep reports whether data nests deeper than maxDepth (strings aside),
// as go-sdk's check does before it decodes.
func tooDeep(data []byte) bool {
	depth, inString, escaped := 0, false, false
	for _, b := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > maxDepth {
				return true
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return false
}
