package elicitform

import (
	"fmt"
	"net/mail"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// Check checks an accepted answer's content against the form: every
// required field present, no field the form lacks, each value of its
// field's type, enum, length and bounds. The error is a VALIDATION_ERROR
// naming the first bad field (in the form's order) as its field.
func (f *Form) Check(content map[string]any) *apierr.Error {
	known := map[string]bool{}
	for _, fd := range f.Fields {
		known[fd.Name] = true
		v, ok := content[fd.Name]
		if !ok || v == nil {
			if fd.Required {
				return apierr.Invalid(fd.Name, fmt.Sprintf("%s is required", fd.Label()))
			}
			continue
		}
		if msg := fd.check(v); msg != "" {
			return apierr.Invalid(fd.Name, msg)
		}
	}
	for name := range content {
		if !known[name] {
			return apierr.Invalid(name, fmt.Sprintf("the form has no field %q", name))
		}
	}
	return nil
}

// check is the problem with v as the field's value ("" if none).
func (fd Field) check(v any) string {
	if err := fd.schema.Validate(v); err != nil {
		return fmt.Sprintf("%s: %s", fd.Label(), fd.explain(v, err))
	}
	if s, ok := v.(string); ok && fd.Format != "" {
		if !validFormat(fd.Format, s) {
			return fmt.Sprintf("%s: %q is not a valid %s", fd.Label(), s, fd.Format)
		}
	}
	return ""
}

// explain says in plain words what the schema library found wrong.
func (fd Field) explain(v any, err error) string {
	switch {
	case !typeMatches(fd.Type, v):
		return fmt.Sprintf("must be %s", article(fd.Type))
	case len(fd.Enum) > 0:
		return "must be one of " + strings.Join(fd.Enum, ", ")
	}
	if s, ok := v.(string); ok {
		n := len([]rune(s))
		if fd.MinLength != nil && n < *fd.MinLength {
			return fmt.Sprintf("must be at least %d characters", *fd.MinLength)
		}
		if fd.MaxLength != nil && n > *fd.MaxLength {
			return fmt.Sprintf("must be at most %d characters", *fd.MaxLength)
		}
	}
	if x, ok := v.(float64); ok {
		if fd.Minimum != nil && x < *fd.Minimum {
			return "must be at least " + strconv.FormatFloat(*fd.Minimum, 'g', -1, 64)
		}
		if fd.Maximum != nil && x > *fd.Maximum {
			return "must be at most " + strconv.FormatFloat(*fd.Maximum, 'g', -1, 64)
		}
	}
	return err.Error()
}

func typeMatches(typ string, v any) bool {
	switch x := v.(type) {
	case string:
		return typ == String
	case bool:
		return typ == Boolean
	case float64:
		return typ == Number || (typ == Integer && x == float64(int64(x)))
	case int, int64:
		return typ == Number || typ == Integer
	}
	return false
}

func article(typ string) string {
	if typ == Integer {
		return "an integer"
	}
	return "a " + typ
}

func validFormat(format, s string) bool {
	switch format {
	case "email":
		a, err := mail.ParseAddress(s)
		return err == nil && a.Address == s
	case "uri":
		u, err := url.Parse(s)
		return err == nil && u.Scheme != ""
	case "date":
		_, err := time.Parse(time.DateOnly, s)
		return err == nil
	case "date-time":
		_, err := time.Parse(time.RFC3339, s)
		return err == nil
	}
	return true
}
