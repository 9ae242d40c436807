package store

import "context"

// Pinger is a store whose backend can be down while the service runs (Vault):
// Ping answers nil when the backend would serve a request now, else an error
// saying why not (unreachable, sealed). The service's readiness follows it.
type Pinger interface {
	Ping(ctx context.Context) error
}
