package launch

import (
	"bytes"
	"sync"
)

// tail keeps the last max bytes written to it and hands each complete line to onLine.
type tail struct {
	mu     sync.Mutex
	buf    []byte
	max    int
	line   []byte
	onLine func(string)
}

func newTail(max int, onLine func(string)) *tail { return &tail{max: max, onLine: onLine} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	if t.onLine != nil {
		t.line = append(t.line, p...)
		for {
			i := bytes.IndexByte(t.line, '\n')
			if i < 0 {
				break
			}
			t.onLine(string(bytes.TrimRight(t.line[:i], "\r")))
			t.line = t.line[i+1:]
		}
		if len(t.line) > t.max { // a runaway line without newline
			t.line = t.line[:0]
		}
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
