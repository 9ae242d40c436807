package mcpserver

import (
	"context"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// acceptsBothSplit is acceptsBoth as it was written with strings.Split: the
// reference the in-place walk must agree with.
func acceptsBothSplit(values []string) bool {
	var j, s bool
	for _, v := range values {
		for _, tok := range strings.Split(v, ",") {
			base, _, _ := strings.Cut(tok, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				j = true
			case "text/event-stream", "text/*":
				s = true
			case "*/*":
				j, s = true, true
			}
		}
	}
	return j && s
}

func TestAcceptsBothAgreesWithSplit(t *testing.T) {
	for _, vs := range [][]string{
		nil, {""}, {","}, {"application/json, text/event-stream"}, {"application/json,text/event-stream"},
		{"application/json", "text/event-stream"}, {"application/json"}, {"text/event-stream"},
		{"*/*"}, {"application/*;q=0.5, text/*"}, {"APPLICATION/JSON, Text/Event-Stream"},
		{"application/json;q=1,", ",text/event-stream"}, {"application/jsonx, text/event-streamx"},
		{"text/html, application/json ; charset=utf-8 ,  text/event-stream  "}, {"", "*/*"},
	} {
		if got, want := acceptsBoth(vs), acceptsBothSplit(vs); got != want {
			t.Errorf("acceptsBoth(%q) = %v, strings.Split's answer %v", vs, got, want)
		}
	}
}

func TestJSONContentAgreesWithParseMediaType(t *testing.T) {
	for _, ct := range []string{
		"application/json", "application/json; charset=utf-8", "Application/JSON", "application/json;",
		"text/plain", "", "application/jsonx", "application/json; charset", " application/json",
		"application/json ", "application/json, text/plain",
	} {
		mt, _, err := mime.ParseMediaType(ct)
		if got, want := jsonContent(ct), err == nil && mt == "application/json"; got != want {
			t.Errorf("jsonContent(%q) = %v, mime.ParseMediaType's answer %v", ct, got, want)
		}
	}
}

// TestEligibleAllocatesNothing: the fast path's check of a call's HTTP side
// runs on every POST; mime.ParseMediaType, strings.Split, a non-canonical
// header name and the host guard's address formatting made 6 objects of it.
func TestEligibleAllocatesNothing(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Host = "127.0.0.1:8080"
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	r.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey,
		&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}))
	if !eligible(r) {
		t.Fatal("a plain call is not eligible")
	}
	if n := testing.AllocsPerRun(100, func() { _ = eligible(r) }); n != 0 {
		t.Errorf("eligible allocates %v objects a request, want 0", n)
	}
}
