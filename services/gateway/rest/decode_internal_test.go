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
		status, err := readJSON(r, &in, false)
		if status != http.StatusBadRequest || err == nil || err.Code != apierr.Validation || err.Field != field {
			t.Errorf("%s: %d %+v, want 400 VALIDATION_ERROR field %q", body, status, err, field)
		}
	}
	r := httptest.NewRequest("POST", "/", strings.NewReader(`{"name": "x", "tools": {"allow": 3}}`))
	var key model.KeyCreateRequest
	if _, err := readJSON(r, &key, false); err == nil || err.Field != "tools.allow" {
		t.Errorf("nested field: %+v", err)
	}
}

// A field promoted from an embedded struct is named as the body spells it,
// not with the embedded struct's Go name (ProfilePutBody embeds
// model.Profile: "provider", not "Profile.provider").
func TestReadJSONNamesPromotedFields(t *testing.T) {
	for body, field := range map[string]string{
		`{"provider": 1}`:                        "provider",
		`{"api_key": 1}`:                         "api_key",
		`{"approval": {"default": 1}}`:           "approval.default",
		`{"approval": {"rules": [{"tool": 1}]}}`: "approval.rules.tool",
	} {
		var in ProfilePutBody
		_, err := readJSON(httptest.NewRequest("PUT", "/", strings.NewReader(body)), &in, false)
		if err == nil || err.Field != field {
			t.Errorf("%s: %+v, want field %q", body, err, field)
		}
	}
}
