package audit

import (
	"fmt"
	"testing"
)

func TestQueueOrderLimitAndReuse(t *testing.T) {
	q := newQueue(3)
	for i := range 4 {
		if ok := q.push(item{subject: fmt.Sprint(i)}); ok != (i < 3) {
			t.Fatalf("push %d: %v, want %v (max 3)", i, ok, i < 3)
		}
	}
	if it, _ := q.pop(); it.subject != "0" {
		t.Fatalf("pop = %q, want the oldest", it.subject)
	}
	if !q.push(item{subject: "3"}) {
		t.Fatal("a push after a pop was refused")
	}
	for _, want := range []string{"1", "2", "3"} {
		if it, ok := q.pop(); !ok || it.subject != want {
			t.Fatalf("pop = %q %v, want %q", it.subject, ok, want)
		}
	}
	if _, ok := q.pop(); ok {
		t.Fatal("pop of an empty queue gave an item")
	}
	// A queue never drained stays within its bound: the waiting move to
	// the front instead of the array growing behind a moving head.
	for i := range 1000 {
		q.push(item{subject: fmt.Sprint(i)})
		q.pop()
		q.push(item{subject: "x"})
		if i%2 == 0 {
			q.pop()
		}
	}
	if c := cap(q.items); c > 8 {
		t.Fatalf("capacity %d after a long run of at most 3 waiting", c)
	}
	if len(q.ready) != 1 {
		t.Fatal("no ready token after pushes")
	}
}
