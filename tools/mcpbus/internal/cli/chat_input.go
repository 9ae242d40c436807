package cli

import (
	"bufio"
	"io"
	"sync"
)

// lineInput reads stdin line by line on its own goroutine, started on first
// use, so waiting for a line can be a select case next to events and signals.
type lineInput struct {
	r    io.Reader
	once sync.Once
	ch   chan string
}

func newLineInput(r io.Reader) *lineInput { return &lineInput{r: r, ch: make(chan string)} }

// lines delivers the lines; it is closed at the end of the input.
func (in *lineInput) lines() <-chan string {
	in.once.Do(func() {
		go func() {
			defer close(in.ch)
			sc := bufio.NewScanner(in.r)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				in.ch <- sc.Text()
			}
		}()
	})
	return in.ch
}
