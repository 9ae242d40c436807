package cli

import "testing"

// TestParseSize: --nats-max-store reads sizes as nats-server's own
// configuration does (powers of 1024), and refuses what it cannot read.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "0": 0, "512": 512, "600M": 600 << 20, "600MB": 600 << 20,
		"8GiB": 8 << 30, "8 gb": 8 << 30, "2T": 2 << 40, "64k": 64 << 10} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"-1G", "1.5G", "8X", "G", "99999999999T"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}
