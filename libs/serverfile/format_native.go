package serverfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// mcpbus's own servers file: {"servers": [McpConfig…]}, JSON or YAML. Its
// configs are model.McpConfig as the API writes them, so it has no types of
// its own.

var configType = reflect.TypeFor[model.McpConfig]()

// parseNative is strict: an unknown field anywhere is an error naming it, so
// a typo never drops a setting.
func parseNative(doc document, vars map[string]string) ([]Entry, error) {
	r := newResolver(vars)
	root, ok := doc.root.(map[string]any)
	if !ok {
		return nil, apierr.Invalid("content", "expected a mapping with a servers list")
	}
	for _, k := range slices.Sorted(maps.Keys(root)) {
		if k != "servers" {
			return nil, apierr.Invalid(k, fmt.Sprintf("unknown field %q", k))
		}
	}
	var list []any
	switch v := root["servers"].(type) {
	case nil:
	case []any:
		list = v
	default:
		return nil, apierr.Invalid("servers", "servers must be a list of servers")
	}
	entries := make([]Entry, 0, len(list))
	for i, item := range list {
		path := fmt.Sprintf("servers[%d]", i)
		m, ok := item.(map[string]any)
		if !ok {
			return nil, apierr.Invalid(path, "a server must be a mapping")
		}
		if err := checkFields(path, m, configType); err != nil {
			return nil, err
		}
		x := nativeExpander{r: r, env: map[string]bool{}, headers: map[string]bool{}}
		expanded, err := x.walk(path, nil, m)
		if err != nil {
			return nil, err
		}
		data, err := json.Marshal(expanded)
		if err != nil {
			return nil, apierr.Wrap(apierr.Internal, "re-encoding a server", err)
		}
		var cfg model.McpConfig
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, typeError(path, err)
		}
		e, err := nativeEntry(path, cfg, x)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// nativeExpander replaces references in every string value of a server and
// records which env var values and header values used a secret one.
type nativeExpander struct {
	r       *resolver
	env     map[string]bool
	headers map[string]bool
}

func (x *nativeExpander) walk(path string, segs []string, v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for _, k := range slices.Sorted(maps.Keys(t)) {
			var err error
			if out[k], err = x.walk(join(path, k), append(segs[:len(segs):len(segs)], k), t[k]); err != nil {
				return nil, err
			}
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, item := range t {
			idx := "[" + strconv.Itoa(i) + "]"
			var err error
			if out[i], err = x.walk(path+idx, append(segs[:len(segs):len(segs)], idx), item); err != nil {
				return nil, err
			}
		}
		return out, nil
	case string:
		s, sv, err := x.r.expand(path, t)
		if err != nil {
			return nil, err
		}
		switch {
		case sv == "":
		case len(segs) == 3 && segs[0] == "env_vars" && segs[2] == "value":
			x.env[segs[1]] = true
		case len(segs) == 3 && segs[0] == "transport" && segs[1] == "headers":
			x.headers[segs[2]] = true
		default:
			return nil, secretOutside(path, sv)
		}
		return s, nil
	}
	return v, nil
}

// nativeEntry takes the secret values out of a decoded config: env values
// that are marked secret, look secret or came from a secret variable, and
// likewise headers. What the file says about required and secret_ref stays.
func nativeEntry(path string, cfg model.McpConfig, x nativeExpander) (Entry, error) {
	var secrets model.Credentials
	for _, name := range slices.Sorted(maps.Keys(cfg.EnvVars)) {
		v := cfg.EnvVars[name]
		if !v.IsSecret && !model.LooksSecret(name) && !x.env[name] {
			continue
		}
		ref := orElse(v.SecretRef, name)
		switch {
		case v.Value != "":
			if secrets.Env == nil {
				secrets.Env = map[string]string{}
			}
			secrets.Env[ref] = v.Value
			v.Value, v.IsSecret, v.SecretRef = "", true, ref
		case x.env[name] || v.IsSecret && v.KeyfilePath == "":
			// An empty secret: named, to be set later.
			v.IsSecret, v.SecretRef = true, ref
		}
		cfg.EnvVars[name] = v
	}
	if len(cfg.EnvVars) == 0 {
		cfg.EnvVars = nil
	}

	t := &cfg.Transport
	secretHeader := map[string]bool{}
	for _, h := range t.SecretHeaders {
		secretHeader[h] = true
	}
	for _, name := range slices.Sorted(maps.Keys(t.Headers)) {
		if err := checkHeader(join(path, "transport.headers."+name), name, t.Headers[name]); err != nil {
			return Entry{}, err
		}
		if !secretHeader[name] && !model.LooksSecret(name) && !x.headers[name] {
			continue
		}
		if val := t.Headers[name]; val != "" {
			if secrets.Headers == nil {
				secrets.Headers = map[string]string{}
			}
			secrets.Headers[name] = val
		}
		delete(t.Headers, name)
		secretHeader[name] = true
	}
	if len(t.Headers) == 0 {
		t.Headers = nil
	}
	t.SecretHeaders = append([]string(nil), slices.Sorted(maps.Keys(secretHeader))...)

	if (cfg.AuthType == "" || cfg.AuthType == model.AuthNone) && hasSecrets(&cfg) {
		// The runner asks the credential service only for servers that need it.
		cfg.AuthType = model.AuthAPIKey
	}
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return Entry{}, apierr.Invalid(join(path, err.Field), err.Message)
	}
	if field, msg, refused := inlineSecret(&cfg); refused {
		return Entry{}, apierr.Invalid(join(path, field), msg)
	}
	return Entry{Config: cfg, Secrets: secrets}, nil
}

func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// checkFields rejects keys that t (a JSON-decoded Go type) does not have,
// naming their full path. Types are checked by the decoder afterwards.
func checkFields(path string, v any, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			fields[orElse(name, f.Name)] = f.Type
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			ft, ok := fields[k]
			if !ok {
				return apierr.Invalid(join(path, k), fmt.Sprintf("unknown field %q", k))
			}
			if err := checkFields(join(path, k), m[k], ft); err != nil {
				return err
			}
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if err := checkFields(join(path, k), m[k], t.Elem()); err != nil {
				return err
			}
		}
	case reflect.Slice:
		list, ok := v.([]any)
		if !ok || t.Elem().Kind() == reflect.Uint8 { // json.RawMessage: free JSON
			return nil
		}
		for i, item := range list {
			if err := checkFields(fmt.Sprintf("%s[%d]", path, i), item, t.Elem()); err != nil {
				return err
			}
		}
	}
	return nil
}

// typeError names the field of a decoding error.
func typeError(path string, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return apierr.Wrap(apierr.Validation, fmt.Sprintf("must be %s, not a %s", describe(te.Type), te.Value), err).WithField(join(path, te.Field))
	}
	return apierr.Wrap(apierr.Validation, "invalid value: "+err.Error(), err).WithField(path)
}

func describe(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Uint64, reflect.Int32, reflect.Uint32:
		return "a whole number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "a list of strings"
		}
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return t.String()
}

// renderNative writes {"servers": [...]} without the fields the config
// service owns (id, revision, version, timestamps), so the file imports anywhere.
func renderNative(configs []model.McpConfig) ([]byte, error) {
	out := struct {
		Servers []exported `json:"servers"`
	}{Servers: make([]exported, 0, len(configs))}
	for _, c := range configs {
		// A deep copy: escaping and placeholders must not touch the caller's slices and maps.
		data, err := json.Marshal(c)
		if err != nil {
			return nil, apierr.Wrap(apierr.Internal, "encoding config "+c.Slug, err)
		}
		var cp model.McpConfig
		if err := json.Unmarshal(data, &cp); err != nil {
			return nil, apierr.Wrap(apierr.Internal, "copying config "+c.Slug, err)
		}
		cp.ID, cp.Revision, cp.Version, cp.CreatedAt, cp.UpdatedAt = "", 0, 0, time.Time{}, time.Time{}
		escapeValue(reflect.ValueOf(&cp).Elem())
		for name, v := range cp.EnvVars {
			if secretEnv(name, v) && (v.KeyfilePath == "" || v.Value != "") {
				v.Value = placeholder(name, false, v.Required || v.Value != "")
				cp.EnvVars[name] = v
			}
		}
		headers, secretHeaders := renderHeaders(cp.Transport)
		cp.Transport.Headers, cp.Transport.SecretHeaders = headers, secretHeaders
		out.Servers = append(out.Servers, exported{McpConfig: cp})
	}
	return encodeJSON(out, "servers file")
}

// exported is a config without its id: the shallower, omitted ID hides the
// embedded one (revision and timestamps are omitted when zero already).
type exported struct {
	ID string `json:"id,omitempty"`
	model.McpConfig
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// escapeValue escapes every string value (not map keys, which are never
// expanded) held by v, so literal ${ survives the re-import.
func escapeValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(escape(v.String()))
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				escapeValue(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type() == rawMessageType {
			v.SetBytes(escapeJSON(v.Bytes()))
			return
		}
		for i := range v.Len() {
			escapeValue(v.Index(i))
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(iter.Value())
			escapeValue(e)
			v.SetMapIndex(iter.Key(), e)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			escapeValue(v.Elem())
		}
	}
}

// escapeJSON escapes the string values of free JSON (the config block).
func escapeJSON(raw []byte) []byte {
	if len(raw) == 0 || !bytes.Contains(raw, []byte("${")) {
		return raw
	}
	v, err := decodeValue(raw)
	if err != nil {
		return raw
	}
	var walk func(any) any
	walk = func(v any) any {
		switch t := v.(type) {
		case string:
			return escape(t)
		case map[string]any:
			for k, x := range t {
				t[k] = walk(x)
			}
		case []any:
			for i, x := range t {
				t[i] = walk(x)
			}
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return raw
	}
	return out
}

// nativeStrings are the string values Parse expands: all of the servers'.
func nativeStrings(doc document) []string {
	root, _ := doc.root.(map[string]any)
	return appendStrings(nil, root["servers"])
}
