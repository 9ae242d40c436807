package audit

import "sync"

// queue holds the events waiting for a Writer, at most max of them. It grows
// with what waits instead of reserving max slots up front: a channel of the
// default 4096 items held ~160 KB per writer, idle or not, in every service.
type queue struct {
	mu    sync.Mutex
	items []item
	head  int // items[head:] wait
	max   int
	ready chan struct{} // a token after a push (capacity 1)
}

func newQueue(max int) *queue { return &queue{max: max, ready: make(chan struct{}, 1)} }

// push adds it unless max items wait; it never blocks.
func (q *queue) push(it item) bool {
	q.mu.Lock()
	if len(q.items)-q.head >= q.max {
		q.mu.Unlock()
		return false
	}
	if q.head > 0 && len(q.items) == cap(q.items) { // move the waiting to the front before growing
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, it)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// pop takes the oldest waiting item, if any.
func (q *queue) pop() (item, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.items) {
		return item{}, false
	}
	it := q.items[q.head]
	q.items[q.head] = item{} // the event's bytes are not kept alive
	q.head++
	if q.head == len(q.items) { // empty: the space is reused from its start
		q.items, q.head = q.items[:0], 0
	}
	return it, true
}

// waiting is how many items wait.
func (q *queue) waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) - q.head
}
