package launch

import (
	"net/http"
	"testing"
	"time"
)

// A Retry-After is passed on in seconds from either of its forms; a huge
// or past one says nothing (it was printed as given: "retry in
// 9223372036854775807 s"), nor does a date form before (it was dropped).
func TestRetryAfterSeconds(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"7", 7, true},
		{" 0 ", 0, true},
		{"86400", 86400, true},
		{"86401", 0, false},
		{"9223372036854775807", 0, false},
		{"-3", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, false},
		{now.Add(48 * time.Hour).Format(http.TimeFormat), 0, false},
		{"soon", 0, false},
		{"", 0, false},
	} {
		got, ok := retryAfterSeconds(c.in, now)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("retryAfterSeconds(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
