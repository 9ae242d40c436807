package rest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
)

// A body that does not decode is a 400 VALIDATION_ERROR naming the field
// at fault when there is one (a form shows the error next to it).
func TestReadJSONNamesTheField(t *testing.T) {
	for body, field := range map[string]string{
		`{"revision": "one"}`:          "revision",
		`{"revision": -1}`:             "revision",
		`{"revision": 1, "force": 1}`:  "force",
		`{"revision": 1}}`:             "",
		`[1]`:                          "",
		`{"revision": 1, "Force": {}}`: "Force",
	} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		var in RollbackBody
		status, err := readJSON(r, &in)
		if status != http.StatusBadRequest || err == nil || err.Code != apierr.Validation || err.Field != field {
			t.Errorf("%s: %d %+v, want 400 VALIDATION_ERROR field %q", body, status, err, field)
		}
	}
	r := httptest.NewRequest("POST", "/", strings.NewReader(`{"name": "x", "tools": {"allow": 3}}`))
	var key model.KeyCreateRequest
	if _, err := readJSON(r, &key); err == nil || err.Field != "tools.allow" {
		t.Errorf("nested field: %+v", err)
	}
}
