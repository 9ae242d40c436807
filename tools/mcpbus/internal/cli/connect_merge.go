package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pelletier/go-toml/v2"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// mergeEntry puts entry under section.name of a client's config file (data,
// empty for a new file) and returns the whole file, every other entry and
// setting kept. An entry of that name already there is an error unless force.
func mergeEntry(format string, data []byte, section, name string, entry map[string]any, force bool) ([]byte, error) {
	if format == "toml" {
		return mergeTOML(data, section, name, entry, force)
	}
	return mergeJSON(data, section, name, entry, force)
}

// exists is the error for an entry already in the file.
func exists(section, name string) error {
	return apierr.Newf(apierr.Conflict, "the file already has an entry %s.%s: give --force to replace it, or another --name", section, name).WithField("name")
}

// mergeJSON merges into a JSON file. Values are kept as they are (raw), keys
// come out sorted; a file that is not plain JSON (comments) is refused
// rather than rewritten.
func mergeJSON(data []byte, section, name string, entry map[string]any, force bool) ([]byte, error) {
	doc := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, apierr.Wrap(apierr.Validation, "the config file is not a JSON object (comments are not supported; edit it by hand or use --print)", err).WithField("file")
		}
	}
	servers := map[string]json.RawMessage{}
	if raw, ok := doc[section]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &servers); err != nil {
			return nil, apierr.Wrap(apierr.Validation, fmt.Sprintf("%q in the config file is not an object", section), err).WithField("file")
		}
	}
	if _, ok := servers[name]; ok && !force {
		return nil, exists(section, name)
	}
	var err error
	if servers[name], err = json.Marshal(entry); err != nil {
		return nil, err
	}
	if doc[section], err = json.Marshal(servers); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// mergeTOML merges into a TOML file. A new entry is appended as its own
// table, so the rest of the file (comments, order) stays byte for byte;
// replacing one (--force), or a file where an appended table would not
// parse, rewrites the file from its parsed form, which drops comments.
func mergeTOML(data []byte, section, name string, entry map[string]any, force bool) ([]byte, error) {
	doc := map[string]any{}
	if err := toml.Unmarshal(data, &doc); err != nil {
		return nil, apierr.Wrap(apierr.Validation, "the config file is not valid TOML", err).WithField("file")
	}
	servers := map[string]any{}
	if raw, ok := doc[section]; ok {
		m, isTable := raw.(map[string]any)
		if !isTable {
			return nil, apierr.Newf(apierr.Validation, "%q in the config file is not a table", section).WithField("file")
		}
		servers = m
	}
	if _, ok := servers[name]; ok && !force {
		return nil, exists(section, name)
	}
	if _, ok := servers[name]; !ok {
		// [section.name] with its sub-tables inline: no [section] header
		// that a file defining [section] itself would see twice.
		var table bytes.Buffer
		fmt.Fprintf(&table, "[%s.%s]\n", section, name)
		if err := toml.NewEncoder(&table).SetTablesInline(true).Encode(entry); err != nil {
			return nil, err
		}
		out := bytes.TrimRight(data, "\n")
		if len(out) > 0 {
			out = append(out, "\n\n"...)
		}
		out = append(out, table.Bytes()...)
		if keepsAll(out, doc, section, name) {
			return out, nil
		}
	}
	servers[name] = entry
	doc[section] = servers
	return toml.Marshal(doc)
}

// keepsAll says out parses, has the entry name and every top-level key and
// entry of before.
func keepsAll(out []byte, before map[string]any, section, name string) bool {
	after := map[string]any{}
	if toml.Unmarshal(out, &after) != nil {
		return false
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			return false
		}
	}
	servers, _ := after[section].(map[string]any)
	if _, ok := servers[name]; !ok {
		return false
	}
	if old, ok := before[section].(map[string]any); ok {
		for k := range old {
			if _, ok := servers[k]; !ok {
				return false
			}
		}
	}
	return true
}

// writeConfig replaces path with data atomically (a temp file renamed over
// it), 0600 as it holds a key, creating its directory.
func writeConfig(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone already after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
