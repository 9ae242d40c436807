package serverfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// The value types of the client formats' entries, decoded from the JSON a
// file was read as (YAML included). The decoders are strict about shapes, as
// a wrong shape is a mistake the user should hear about, but lenient about
// scalars: YAML writers put numbers and booleans where strings are meant
// (PORT: 8080).

// fieldError is a value that does not fit. at is where, below the value
// being decoded (".env.A", "[2]", "" for the value itself): UnmarshalJSON does
// not know the path of its value, so the caller that does names the field.
type fieldError struct {
	at, msg string
}

func (e *fieldError) Error() string { return e.msg }

func invalidValue(msg string) error { return &fieldError{msg: msg} }

func unknownField(key string) error { return invalidValue(fmt.Sprintf("unknown field %q", key)) }

// below puts err one step (".key" or "[i]") below the value being decoded.
func below(step string, err error) error {
	var fe *fieldError
	if errors.As(err, &fe) {
		return &fieldError{at: step + fe.at, msg: fe.msg}
	}
	return err
}

// fieldAt is the error of decoding the value at path (never empty).
func fieldAt(path string, err error) error {
	var fe *fieldError
	if errors.As(err, &fe) {
		return apierr.Invalid(path+fe.at, fe.msg)
	}
	return apierr.Wrap(apierr.Validation, "content cannot be read: "+err.Error(), err).WithField(path)
}

// kindOf is the first byte of a JSON value: '{', '[', '"', 'n' (null), 't' or
// 'f' (booleans), or a digit or '-' (numbers).
func kindOf(data []byte) byte {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return 0
	}
	return data[0]
}

// eachField calls fn with the fields of a JSON object in the order of their
// names, so the error reported does not depend on how the file is ordered,
// and puts fn's error below the field. The entry types decode with it rather
// than with encoding/json's struct decoding, which matches names regardless
// of case ("Command" would be read as command, not refused as unknown).
func eachField(data []byte, notObject string, fn func(key string, value json.RawMessage) error) error {
	if kindOf(data) != '{' {
		return invalidValue(notObject)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if err := fn(k, fields[k]); err != nil {
			return below("."+k, err)
		}
	}
	return nil
}

// text is a string; a number or a boolean is read as written, null as "".
type text string

func (t *text) UnmarshalJSON(data []byte) error {
	switch kindOf(data) {
	case '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*t = text(s)
	case '{', '[':
		return invalidValue("must be a string")
	case 'n':
		*t = ""
	default:
		*t = text(bytes.TrimSpace(data))
	}
	return nil
}

// textList is a list of text; null is no list, but a null item is refused.
type textList []string

func (l *textList) UnmarshalJSON(data []byte) error {
	switch kindOf(data) {
	case 'n':
		*l = nil
		return nil
	case '[':
	default:
		return invalidValue("must be a list of strings")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		return err
	}
	out := make(textList, len(items))
	for i, item := range items {
		at := "[" + strconv.Itoa(i) + "]"
		if kindOf(item) == 'n' {
			return below(at, invalidValue("must be a string"))
		}
		if err := json.Unmarshal(item, (*text)(&out[i])); err != nil {
			return below(at, err)
		}
	}
	*l = out
	return nil
}

// textMap maps names to text; null is no map.
type textMap map[string]string

func (m *textMap) UnmarshalJSON(data []byte) error {
	if kindOf(data) == 'n' {
		*m = nil
		return nil
	}
	out := textMap{}
	err := eachField(data, "must be a mapping of names to strings", func(k string, v json.RawMessage) error {
		var t text
		err := json.Unmarshal(v, &t)
		out[k] = string(t)
		return err
	})
	if err != nil {
		return err
	}
	*m = out
	return nil
}

// boolean is true or false, and nothing else (not even null).
func boolean(data []byte) (bool, error) {
	switch string(bytes.TrimSpace(data)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, invalidValue("must be true or false")
}
