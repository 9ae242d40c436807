package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	segjson "github.com/segmentio/encoding/json"

	"github.com/mcpbus/mcpbus/libs/jsonscan"
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

// errInexactID refuses a request whose id is a number go-sdk would not
// answer under: it reads a numeric id as a float64 and keeps it as an
// int64, so 1.5 would be answered as 1, 9007199254740993 as
// 9007199254740992 and 2^63-1 as -2^63, each another request's id, while a
// response MUST carry its request's id. MCP ids are strings or integers; the
// integers a response carries exactly are JavaScript's safe ones.
var errInexactID = errors.New("the id must be a string or an integer of at most 2^53-1 (a response could not carry this one exactly)")

// checkID is errInexactID for msg, decoded from data, when it is a request
// (not a notification) whose numeric id is not one a response carries as
// written (exactID); nil for anything else.
func checkID(msg jsonrpc.Message, data []byte) error {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return nil
	}
	if _, num := req.ID.Raw().(int64); num && !exactID(data) {
		return errInexactID
	}
	return nil
}

// maxSafeID is the largest integer a float64 holds with its neighbours
// distinct (JavaScript's Number.MAX_SAFE_INTEGER).
const maxSafeID = 1<<53 - 1

// exactID reports whether the id of the JSON object in data is not a number
// or is an integer of magnitude at most maxSafeID, however JSON writes it
// (1.0, 1e3 and 100e-2 are integers; 1.5 and 1.0000000000000001 are not).
// The last id member counts, as for a decoder.
func exactID(data []byte) bool {
	var id []byte
	jsonscan.Members(data, func(key, val []byte) bool {
		if jsonscan.KeyIs(key, "id") {
			id = val
		}
		return true
	})
	id = bytes.TrimSpace(id)
	if len(id) == 0 || (id[0] != '-' && (id[0] < '0' || id[0] > '9')) {
		return true // a string, or not for this check
	}
	return safeInteger(string(bytes.TrimPrefix(id, []byte{'-'})))
}

// safeInteger reports whether the JSON number lit (without its sign) is an
// integer of at most maxSafeID, by its decimal digits: through a float64,
// 1.0000000000000001 would be 1.
func safeInteger(lit string) bool {
	mant, exp := lit, 0
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		mant = lit[:i]
		e, err := strconv.Atoi(strings.TrimPrefix(lit[i+1:], "+"))
		if err != nil {
			// An exponent past int: the value is 0 (all digits zero),
			// huge or a fraction.
			return strings.Trim(mant, "0.") == ""
		}
		exp = e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= len(frac)
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	digits = trimmed
	switch {
	case digits == "":
		return true // zero
	case exp < 0:
		return false // a fraction
	case len(digits)+exp > 16: // maxSafeID has 16 digits
		return false
	}
	n, err := strconv.ParseUint(digits+strings.Repeat("0", exp), 10, 64)
	return err == nil && n <= maxSafeID
}
