package elicitform

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Value reads what a person typed for the field (a terminal prompt) as the
// field's JSON value, then checks it; the error says what to type instead.
func (fd Field) Value(text string) (any, error) {
	text = strings.TrimSpace(text)
	var v any
	switch fd.Type {
	case Boolean:
		switch strings.ToLower(text) {
		case "y", "yes", "true":
			v = true
		case "n", "no", "false":
			v = false
		default:
			return nil, fmt.Errorf("answer yes or no")
		}
	case Number, Integer:
		x, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: must be %s", fd.Label(), article(fd.Type))
		}
		v = x
	default:
		v = text
		if n, err := strconv.Atoi(text); err == nil && len(fd.Enum) > 0 && !slices.Contains(fd.Enum, text) && n >= 1 && n <= len(fd.Enum) {
			v = fd.Enum[n-1] // the number of a listed choice
		}
	}
	if msg := fd.check(v); msg != "" {
		return nil, fmt.Errorf("%s", msg)
	}
	return v, nil
}
