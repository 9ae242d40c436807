package model

import "time"

// A server's own notifications that the gateway passes on to its clients
// travel as events (runner → gateway instances): its prompt or resource
// list changed, and a resource a client subscribed to was updated.

// ResourceUpdatedEvent is published on events.resource_updated.<server>
// when the server says a resource a client subscribed to changed (its
// notifications/resources/updated), at most once a second per resource.
// URI is the server's own URI, as in its resources/list.
type ResourceUpdatedEvent struct {
	Server string    `json:"server"`
	URI    string    `json:"uri"`
	At     time.Time `json:"at"`
}

// ListChangedEvent is published on events.list_changed.<server> when the
// server says its prompts or resources changed (its
// notifications/prompts/list_changed or resources/list_changed), at most
// once a second per list. List is "prompts" or "resources".
type ListChangedEvent struct {
	Server string    `json:"server"`
	List   string    `json:"list"`
	At     time.Time `json:"at"`
}

// The lists a ListChangedEvent names.
const (
	ListPrompts   = "prompts"
	ListResources = "resources"
)

// ResourceSubscriptionLease is how long a resources/subscribe on the rpc
// subject holds the server's subscription to a resource: the gateway asks
// again every third of it while a client of its holds the subscription. No
// unsubscribe crosses the bus (several gateway instances may hold one
// resource), so a subscription nobody renews lapses.
const ResourceSubscriptionLease = 3 * time.Minute

// MaxResourceSubscriptions bounds the resources of one server subscribed
// at once.
const MaxResourceSubscriptions = 256
