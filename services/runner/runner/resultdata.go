package runner

import (
	"github.com/mcpbus/mcpbus/libs/jsonscan"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/secretscan"
)

// minBinary is the shortest base64 value the secret scan leaves out: a
// shorter one costs little to scan, and a secret written in clear where
// data belongs would be about this short.
const minBinary = 256

// binaryData is where a tool result (a CallToolResult's JSON) holds base64
// data: the data of its image and audio content, the blob of an embedded
// resource, each a whole JSON string (quotes included) of at least
// minBinary bytes, every one a base64 character. The secret scan leaves
// them out (secretscan.ScanSkipping): no rule or known value can be read
// in encoded bytes, and scanning a screenshot cost milliseconds.
func binaryData(result []byte) []secretscan.Span {
	var out []secretscan.Span
	add := binaryAdder(result, &out)
	jsonscan.Members(result, func(key, content []byte) bool {
		if string(key) != "content" {
			return true
		}
		jsonscan.Elements(content, func(item []byte) bool {
			contentBinary(item, add)
			return true
		})
		return false
	})
	return out
}

// replyBinary is binaryData of an rpc's reply: the blobs of a
// resources/read's contents, the data of a prompts/get's messages' content.
func replyBinary(method string, reply []byte) []secretscan.Span {
	var out []secretscan.Span
	add := binaryAdder(reply, &out)
	list := map[string]string{"resources/read": "contents", "prompts/get": "messages"}[method]
	if list == "" {
		return nil
	}
	jsonscan.Members(reply, func(key, items []byte) bool {
		if string(key) != list {
			return true
		}
		jsonscan.Elements(items, func(item []byte) bool {
			jsonscan.Members(item, func(k, v []byte) bool {
				switch {
				case list == "contents" && string(k) == "blob":
					add(v)
				case list == "messages" && string(k) == "content":
					contentBinary(v, add)
				}
				return true
			})
			return true
		})
		return false
	})
	return out
}

// binaryAdder adds to out the span of a value of payload (a slice of it)
// that is base64 data of at least minBinary bytes.
func binaryAdder(payload []byte, out *[]secretscan.Span) func(val []byte) {
	return func(val []byte) {
		if len(val) >= minBinary+2 && val[0] == '"' && isBase64(val[1:len(val)-1]) {
			start := cap(payload) - cap(val) // val is a slice of payload
			*out = append(*out, secretscan.Span{Start: start, End: start + len(val)})
		}
	}
}

// contentBinary hands add the base64 data of one content item: an image's
// or audio's data, an embedded resource's blob.
func contentBinary(item []byte, add func(val []byte)) {
	var kind string
	var data, resource []byte
	jsonscan.Members(item, func(k, v []byte) bool {
		switch string(k) {
		case "type":
			kind = string(v)
		case "data":
			data = v
		case "resource":
			resource = v
		}
		return true
	})
	switch kind {
	case `"image"`, `"audio"`:
		add(data)
	case `"resource"`:
		jsonscan.Members(resource, func(k, v []byte) bool {
			if string(k) == "blob" {
				add(v)
			}
			return true
		})
	}
}

// isBase64 reports whether every byte of b is of standard base64 (an
// escape or any other byte: not data, scanned). A table: the range tests
// branch unpredictably on random data (7 ns a byte against 0.5).
func isBase64(b []byte) bool {
	for _, c := range b {
		if !base64Bytes[c] {
			return false
		}
	}
	return true
}

var base64Bytes = func() (t [256]bool) {
	for _, c := range []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") {
		t[c] = true
	}
	return t
}()

// relayedBinary is binaryData of what is relayed between a server and its
// caller (checkRelayed): the data of a sampling request's messages'
// content, of a sampling answer's content. An elicitation has none.
func relayedBinary(method string, payload []byte, answer bool) []secretscan.Span {
	if method != model.MethodCreateMessage {
		return nil
	}
	var out []secretscan.Span
	add := binaryAdder(payload, &out)
	// content is one item, or (sampling with tools) a list of them.
	content := func(v []byte) {
		if !jsonscan.Elements(v, func(item []byte) bool { contentBinary(item, add); return true }) {
			contentBinary(v, add)
		}
	}
	jsonscan.Members(payload, func(key, val []byte) bool {
		switch {
		case answer && string(key) == "content":
			content(val)
		case !answer && string(key) == "messages":
			jsonscan.Elements(val, func(msg []byte) bool {
				jsonscan.Members(msg, func(k, v []byte) bool {
					if string(k) == "content" {
						content(v)
					}
					return true
				})
				return true
			})
		}
		return true
	})
	return out
}
