package model

import "testing"

func TestTaskProgressString(t *testing.T) {
	for _, c := range []struct {
		p    TaskProgress
		want string
	}{
		{TaskProgress{Progress: 3, Total: 10, Message: "step 3"}, "step 3 (3/10)"},
		{TaskProgress{Progress: 3, Total: 10}, "3/10"},
		{TaskProgress{Progress: 0.25}, "0.25"},
		{TaskProgress{Progress: 40, Message: "copying"}, "copying (40)"},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.p, got, c.want)
		}
	}
}
