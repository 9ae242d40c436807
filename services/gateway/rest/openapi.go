package rest

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3.1 document of every gateway route.
//
//go:embed openapi.json
var OpenAPI []byte

func (a *API) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(OpenAPI)
}
