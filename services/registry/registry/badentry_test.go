package registry_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/registry/registrytest"
)

// One entry with a field of the wrong type (anyone can publish, a mirror
// can be broken) leaves that entry out; it does not take the rest of the
// page, and so every search its name matches, with it.
func TestSearchSkipsEntryWithWrongFieldTypes(t *testing.T) {
	e := start(t, setup{})
	list, _ := json.Marshal(map[string]any{"servers": []any{
		map[string]any{"server": map[string]any{"name": "io.github.good/weather", "version": "1.0.0", "description": "forecasts"}},
		map[string]any{"server": map[string]any{"name": "io.github.bad/weather", "version": 7, "packages": "none"}},
		map[string]any{"server": map[string]any{"name": "io.github.good/weather-two", "version": "2.0.0"}},
	}, "metadata": map[string]any{"count": 3}})
	e.off.SetFault(registrytest.Fault{Body: string(list)})
	rows, _ := json.Marshal(map[string]any{"servers": []any{
		map[string]any{"qualifiedName": "@good/weather-now", "displayName": "Weather now"},
		map[string]any{"qualifiedName": "@bad/weather", "useCount": "lots", "verified": "yes"},
	}, "pagination": map[string]any{"currentPage": 1, "totalPages": 1}})
	e.smi.SetFault(registrytest.Fault{Body: string(rows)})

	r := e.search(t, model.RegistrySearchRequest{Query: "weather"})
	got := names(r.Results)
	slices.Sort(got)
	if want := []string{"@good/weather-now", "io.github.good/weather", "io.github.good/weather-two"}; !slices.Equal(got, want) {
		t.Fatalf("results %q (warnings %+v), want %q", got, r.Warnings, want)
	}
	if len(r.Warnings) != 0 {
		t.Fatalf("warnings: %+v", r.Warnings)
	}
}
