// Package httpserve serves the bench commands' HTTP endpoints (the peer
// proxy, the relay floor) the same way: print the URL, serve until ctx ends,
// then shut down.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Until prints http://<addr>/mcp of ln on stdout (the benchmarks read it),
// serves h on ln until ctx ends, and then shuts the server down, closing
// what is still open after a second (open event streams never go idle).
func Until(ctx context.Context, ln net.Listener, h http.Handler) error {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := hs.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = hs.Close()
	}
	return nil
}
