package registrytest

import (
	"path/filepath"
	"runtime"
	"testing"
)

// testdata is services/registry/testdata, found from this file's location so
// any test package can load the recorded samples.
func testdata(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("registrytest: runtime.Caller cannot locate the samples")
	}
	return filepath.Join(filepath.Dir(file), "..", "testdata")
}

// SampleOfficial serves the recorded Official Registry sample
// (official-sample.json) until the test ends.
func SampleOfficial(t testing.TB) *Official {
	t.Helper()
	entries, err := LoadOfficial(filepath.Join(testdata(t), "official-sample.json"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := NewOfficial(entries)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	return o
}

// SampleSmithery serves the recorded Smithery sample (smithery-sample.json)
// until the test ends, answering only requests with apiKey as bearer token.
func SampleSmithery(t testing.TB, apiKey string) *Smithery {
	t.Helper()
	data, err := LoadSmithery(filepath.Join(testdata(t), "smithery-sample.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSmithery(data, apiKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}
