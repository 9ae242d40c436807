package helmchart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// kubeModule is the Kubernetes release whose OpenAPI document the chart is
// checked against: the k8s.io/api of this module's go.mod, from the same
// release. kubeconform's own schemas come from a GitHub repository, which CI
// cannot reach; the k8s.io/kubernetes module (an 18 MB zip from the Go
// module proxy, fetched once per machine by .ci/run) carries the document
// they are generated from, api/openapi-spec/swagger.json.
const kubeModule = "k8s.io/kubernetes@v1.37.2"

// kubeSchemas writes kubeconform's schemas for every kind of swagger.json
// into a temporary directory and returns the location template for
// kubeconform's -schema-location. As kubernetes-json-schema's
// "-strict" variant does (openapi2jsonschema --kubernetes --strict): objects
// with properties refuse others, int-or-string and quantities take either
// form, an optional field may be null. Rather than one standalone file per
// kind, each kind's file refers into one shared _definitions.json.
func kubeSchemas(t *testing.T) string {
	t.Helper()
	// Outside any module or workspace: a download by version, nothing else.
	cmd := exec.Command("go", "mod", "download", "-json", kubeModule)
	cmd.Dir, cmd.Env = t.TempDir(), append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s (.ci/run fetches it; needs the Go module proxy once): %v\n%s", kubeModule, err, out)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s: %s %v", kubeModule, mod.Error, err)
	}
	data, err := os.ReadFile(filepath.Join(mod.Dir, "api", "openapi-spec", "swagger.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("swagger.json: %v", err)
	}
	dir := t.TempDir()
	defs := map[string]any{}
	kinds := 0
	for name, def := range doc.Definitions {
		defs[name] = convert(name, def)
		gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk, _ := g.(map[string]any)
			group, _ := gvk["group"].(string)
			version, _ := gvk["version"].(string)
			kind, _ := gvk["kind"].(string)
			suffix := "-" + version
			if group != "" {
				suffix = "-" + strings.Split(group, ".")[0] + "-" + version
			}
			ref, _ := json.Marshal(map[string]string{"$ref": "_definitions.json#/definitions/" + name})
			if err := os.WriteFile(filepath.Join(dir, strings.ToLower(kind)+suffix+".json"), ref, 0o600); err != nil {
				t.Fatal(err)
			}
			kinds++
		}
	}
	all, err := json.Marshal(map[string]any{"definitions": defs})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "_definitions.json"), all, 0o600); err != nil {
		t.Fatal(err)
	}
	if kinds < 50 {
		t.Fatalf("%s: only %d kinds in swagger.json", kubeModule, kinds)
	}
	return filepath.Join(dir, "{{ .ResourceKind }}{{ .KindSuffix }}.json")
}

// convert turns one swagger definition into strict JSON Schema (draft 4,
// kubeconform's default).
func convert(name string, def map[string]any) any {
	switch name {
	case "io.k8s.apimachinery.pkg.util.intstr.IntOrString":
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
	case "io.k8s.apimachinery.pkg.api.resource.Quantity":
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
	}
	return strict(def)
}

// strict rewrites a schema in place: objects with properties get
// additionalProperties false, and properties not required may be null. Its
// refs (#/definitions/x) stay as they are: _definitions.json keeps the
// definitions where swagger.json had them.
func strict(v any) any {
	switch s := v.(type) {
	case []any:
		for i := range s {
			s[i] = strict(s[i])
		}
		return s
	case map[string]any:
		for k, x := range s {
			s[k] = strict(x)
		}
		props, ok := s["properties"].(map[string]any)
		if !ok {
			return s
		}
		if _, set := s["additionalProperties"]; !set {
			s["additionalProperties"] = false
		}
		required := map[string]bool{}
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				required[fmt.Sprint(r)] = true
			}
		}
		for p, x := range props {
			if ps, ok := x.(map[string]any); ok && !required[p] {
				if typ, ok := ps["type"].(string); ok {
					ps["type"] = []any{typ, "null"}
				}
			}
		}
		return s
	}
	return v
}
