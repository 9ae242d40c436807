package openai

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// GET /v1/models/{model} (models.retrieve) is the entry /v1/models lists;
// an unknown or malformed model is OpenAI's model_not_found.
func TestModelRetrieve(t *testing.T) {
	_, nc := startFake(t, twoSteps)
	url := serve(t, nc, Options{})
	resp, err := http.Get(url + "/v1/models/p1")
	if err != nil {
		t.Fatal(err)
	}
	var m Model
	decodeBody(t, resp, &m)
	if m != (Model{ID: "p1", Object: "model", Created: fakeProfile.CreatedAt.Unix(), OwnedBy: "mcpbus"}) {
		t.Fatalf("model %+v", m)
	}
	for _, name := range []string{"nope", "Not%20A%20Slug"} {
		resp, err := http.Get(url + "/v1/models/" + name)
		if err != nil {
			t.Fatal(err)
		}
		var body errorBody
		err = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusNotFound || body.Error == nil || body.Error.Code == nil || *body.Error.Code != "model_not_found" {
			t.Fatalf("%s: %d %+v %v", name, resp.StatusCode, body.Error, err)
		}
	}
}

// The error contract's answers under /v1 become OpenAI error objects with
// their status and headers; OpenAI errors, successes and other paths pass.
func TestErrorsMiddleware(t *testing.T) {
	h := Errors(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("as") {
		case "contract":
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcpbus"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write(apierr.New(apierr.Unauthorized, "an API key is required").WithField("Authorization").JSON())
		case "plain":
			http.Error(w, "not found", http.StatusNotFound)
		case "openai":
			writeError(w, invalid("messages", "bad"))
		default:
			writeJSON(w, http.StatusOK, map[string]string{"ok": "yes"})
		}
	}))
	do := func(path string) (*httptest.ResponseRecorder, map[string]*Error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var body map[string]*Error
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		return rec, body
	}
	rec, body := do("/v1/models?as=contract")
	if e := body["error"]; rec.Code != http.StatusUnauthorized || e == nil || e.Type != "authentication_error" || e.Message != "an API key is required" ||
		e.Param == nil || *e.Param != "Authorization" || e.Code == nil || *e.Code != "unauthorized" || rec.Header().Get("WWW-Authenticate") == "" {
		t.Fatalf("contract error: %d %s", rec.Code, rec.Body)
	}
	rec, body = do("/v1/nope?as=plain")
	if e := body["error"]; rec.Code != http.StatusNotFound || e == nil || e.Type != "invalid_request_error" || e.Message != "not found" {
		t.Fatalf("plain error: %d %s", rec.Code, rec.Body)
	}
	rec, body = do("/v1/chat/completions?as=openai")
	if e := body["error"]; rec.Code != http.StatusBadRequest || e == nil || *e.Param != "messages" {
		t.Fatalf("openai error: %d %s", rec.Code, rec.Body)
	}
	for _, path := range []string{"/v1/models", "/api/v1/servers?as=contract"} {
		rec, _ := do(path)
		want := `{"ok":"yes"}`
		if path != "/v1/models" {
			want = string(apierr.New(apierr.Unauthorized, "an API key is required").WithField("Authorization").JSON())
		}
		if got, _ := io.ReadAll(rec.Body); string(got) != want+"\n" && string(got) != want {
			t.Fatalf("%s: %d %s, want it unchanged", path, rec.Code, got)
		}
	}
}
