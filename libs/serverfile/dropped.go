package serverfile

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/mcpbus/mcpbus/libs/model"
)

// Dropped says, one line per server, which settings an export of configs in
// format would lose: the settings the format cannot hold (the client formats
// have no tool filters, timeouts, source…). It renders each config alone,
// reads the file back and compares, so it is exactly what the round trip
// keeps; mcpbus's own format (model.FormatServers) loses nothing and gives
// none. Secret values are never in an export: a secret written as a ${VAR}
// placeholder is not a loss.
func Dropped(format string, configs []model.McpConfig) []string {
	var out []string
	for _, c := range configs {
		lost, err := droppedFields(format, c)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("%s: cannot be read back from %s (%v)", c.Slug, format, err))
		case len(lost) > 0:
			for i, f := range lost {
				if label, ok := fieldLabels[f]; ok {
					lost[i] = label
				}
			}
			out = append(out, fmt.Sprintf("%s: the %s format has no place for %s; not exported (use --format %s to keep everything)",
				c.Slug, format, strings.Join(lost, ", "), model.FormatServers))
		}
	}
	return out
}

// fieldLabels say what a config field holds, for the lines of Dropped.
var fieldLabels = map[string]string{
	"tools":   "tool filters (tools.allow/deny)",
	"runtime": "timeouts and runtime settings (runtime)",
	"source":  "its registry source (source)",
	"config":  "its settings (config)",
}

// droppedFields are the top-level config fields (JSON names) of c that do not
// survive a render and parse in format.
func droppedFields(format string, c model.McpConfig) ([]string, error) {
	data, err := Render(format, []model.McpConfig{c})
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	for _, name := range References(data) {
		vars[name] = "x"
	}
	entries, err := Parse(format, data, vars)
	if err != nil {
		return nil, err
	}
	if len(entries) != 1 {
		return nil, fmt.Errorf("%d servers read back", len(entries))
	}
	want, got := comparable(c), comparable(entries[0].Config)
	var lost []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if !reflect.DeepEqual(want[k], got[k]) {
			lost = append(lost, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			lost = append(lost, k) // a default the original did not have
		}
	}
	slices.Sort(lost)
	return slices.Compact(lost), nil
}

// comparable is c's settings as JSON fields, without what the config service
// owns (id, slug, revision, version, timestamps) and with secrets reduced to their
// names (an export writes placeholders, an import stores the value apart).
func comparable(c model.McpConfig) map[string]any {
	c.Normalize()
	c.ID, c.Slug, c.Revision, c.Version = "", "", 0, 0
	env := make(map[string]model.EnvVar, len(c.EnvVars))
	for name, v := range c.EnvVars {
		if secretEnv(name, v) && v.KeyfilePath == "" {
			v = model.EnvVar{IsSecret: true, Required: v.Required || v.Value != ""}
		}
		env[name] = v
	}
	c.EnvVars = env
	if len(c.EnvVars) == 0 {
		c.EnvVars = nil
	}
	headers, secret := renderHeaders(c.Transport)
	for name := range headers {
		if slices.Contains(secret, name) {
			delete(headers, name)
		}
	}
	c.Transport.Headers, c.Transport.SecretHeaders = headers, secret
	if len(c.Transport.Headers) == 0 {
		c.Transport.Headers = nil
	}
	slices.Sort(c.Transport.SecretHeaders)
	data, _ := json.Marshal(c)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	delete(m, "created_at")
	delete(m, "updated_at")
	return m
}
