package loop

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
)

// The runner answers a call's deadline with NETWORK_ERROR "timed out" just
// before this process's timer fires: that is the call's timeout, while the
// same code long before the deadline, or another code, is a failure.
func TestAtDeadline(t *testing.T) {
	timedOut := apierr.New(apierr.Network, "Tool call timed out after 3s")
	near, cancel := context.WithTimeout(t.Context(), deadlineSlack/2)
	defer cancel()
	far, cancel2 := context.WithTimeout(t.Context(), time.Minute)
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"network error at the deadline", near, timedOut, true},
		{"network error long before it", far, timedOut, false},
		{"another code at the deadline", near, apierr.New(apierr.ServiceUnavailable, "tool failed"), false},
		{"no deadline", context.Background(), timedOut, false},
		{"a plain error", near, errors.New("boom"), false},
	} {
		if got := atDeadline(c.ctx, c.err); got != c.want {
			t.Errorf("%s: atDeadline = %v, want %v", c.name, got, c.want)
		}
	}
}
