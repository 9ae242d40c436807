package openai

import (
	"sync"

	"github.com/mcpbus/mcpbus/libs/model"
)

// eventBuffer is how many events a completion may lag behind before it is
// told it missed some (text deltas are coalesced upstream).
const eventBuffer = 1024

// events is a live subscription to one conversation's events.
type events struct {
	// C receives the events in publication order.
	C <-chan model.ChatEvent
	// Lost is closed when an event could not be buffered: the reader fell
	// too far behind and the stream is no longer complete.
	Lost  <-chan struct{}
	Close func()
}

// subscribe follows a conversation's events; a Send after it misses none.
func (a *API) subscribe(conversation string) (*events, error) {
	ch := make(chan model.ChatEvent, eventBuffer)
	lost := make(chan struct{})
	closeLost := sync.OnceFunc(func() { close(lost) })
	stop, err := a.chat.FollowChat(conversation, func(ev model.ChatEvent) {
		select {
		case ch <- ev:
		default:
			closeLost()
		}
	})
	if err != nil {
		return nil, err
	}
	return &events{C: ch, Lost: lost, Close: stop}, nil
}
