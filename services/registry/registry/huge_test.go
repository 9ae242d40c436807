package registry_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/services/registry/registrytest"
)

// An answer within the byte bound can still hold millions of tiny values
// ({} is 3 bytes; decoded into a server or package it is a kilobyte or
// more). It is refused before it is decoded.
func TestRegistryAnswerWithTooManyValuesRefused(t *testing.T) {
	e := start(t, setup{})
	servers := `{"servers":[` + strings.Repeat(`{},`, 1_000_000) + `{}]}`
	e.off.SetFault(registrytest.Fault{Body: servers})
	began := time.Now()
	err := e.searchErr(t, model.RegistrySearchRequest{Query: "many", Registry: model.RegistryOfficial})
	if err.Code != apierr.ServiceUnavailable || !strings.Contains(err.Message, "JSON values") {
		t.Fatalf("search of a list of a million {}: %v", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("refusing took %v", took)
	}
	packages := `{"server":{"name":"io.github.many/packages","version":"1.0.0","packages":[` + strings.Repeat(`{},`, 1_000_000) + `{}]}}`
	e.off.SetFault(registrytest.Fault{Body: packages})
	err = e.getErr(t, model.RegistryGetRequest{Name: "io.github.many/packages"})
	if err.Code != apierr.ServiceUnavailable || !strings.Contains(err.Message, "JSON values") {
		t.Fatalf("get of an entry of a million packages: %v", err)
	}
	rows := `{"servers":[` + strings.Repeat(`{"qualifiedName":"a,b,c"},`, 60_000) + `{}]}`
	e.smi.SetFault(registrytest.Fault{Body: rows})
	err = e.searchErr(t, model.RegistrySearchRequest{Query: "many", Registry: model.RegistrySmithery})
	if err.Code != apierr.ServiceUnavailable || !strings.Contains(err.Message, "JSON values") {
		t.Fatalf("smithery list of 60000 rows: %v", err)
	}
	// Commas, brackets and escaped quotes inside strings are not values.
	e.smi.SetFault(registrytest.Fault{Body: `{"servers":[{"qualifiedName":"@ok/text","description":"` +
		strings.Repeat(`,[{\"`, 60_000) + `"}],"pagination":{"totalPages":1}}`})
	if r := e.search(t, model.RegistrySearchRequest{Query: "text", Registry: model.RegistrySmithery}); len(r.Results) != 1 {
		t.Fatalf("a description full of commas: %v", names(r.Results))
	}
}
