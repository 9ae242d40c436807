package natsconn

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpbus/mcpbus/libs/access"
)

// TestClaim: each claim of a directory of instance seeds gets one no other
// holds; with all held, a clear error; a released one is taken again.
func TestClaim(t *testing.T) {
	dir := t.TempDir()
	st, err := access.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append(access.RunnerNames(3), "runner") {
		if _, err := st.Ensure(name, access.Runner); err != nil {
			t.Fatal(err)
		}
	}
	held := map[string]func(){}
	for range 3 {
		f, release, err := Claim(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := held[f]; dup {
			t.Fatalf("%s claimed twice", f)
		}
		held[f] = release
	}
	if _, _, err := Claim(dir); err == nil || !strings.Contains(err.Error(), "--runners") {
		t.Fatalf("a fourth claim of three seeds: %v", err)
	}
	second := filepath.Join(dir, "runner-2.nk")
	held[second]()
	f, release, err := Claim(dir)
	if err != nil || f != second {
		t.Fatalf("after releasing runner-2: %s %v", f, err)
	}
	release()
	for name, r := range held {
		if name != second {
			r()
		}
	}
}
