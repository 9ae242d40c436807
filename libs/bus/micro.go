package bus

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Endpoint is one request/reply endpoint of a micro service.
type Endpoint struct {
	Name    string
	Subject string
	// Handler answers; JSONHandler gives panic recovery, trace extraction
	// and the error contract.
	Handler micro.Handler
	// Broadcast makes every instance hear the requests (no queue group).
	Broadcast bool
	// Local also serves the endpoint's requests from this process without
	// NATS (RequestLocal), for subjects "<literal>.*"; Stop ends that first.
	Local bool
}

// ServiceConfig is a micro service and its endpoints.
type ServiceConfig struct {
	Name        string
	Version     string
	Description string
	// QueueGroup instances share the work in (default: Name).
	QueueGroup string
	Metadata   map[string]string
	Endpoints  []Endpoint
	// Logger says when a request is refused for its reply subject
	// (default slog.Default()).
	Logger *slog.Logger
}

// flushTimeout bounds waiting for the server to confirm the subscriptions.
const flushTimeout = 10 * time.Second

// StartService registers a micro service and its endpoints, and returns once
// the server has their subscriptions, so a request sent after it returns is
// answered. Stop the service to drain its endpoints.
func StartService(nc *nats.Conn, cfg ServiceConfig) (micro.Service, error) {
	if cfg.QueueGroup == "" {
		cfg.QueueGroup = cfg.Name
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name: cfg.Name, Version: cfg.Version, Description: cfg.Description,
		QueueGroup: cfg.QueueGroup, Metadata: cfg.Metadata,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: micro service: %w", cfg.Name, err)
	}
	var unregister []func()
	for _, e := range cfg.Endpoints {
		opts := []micro.EndpointOpt{micro.WithEndpointSubject(e.Subject)}
		if e.Broadcast {
			opts = append(opts, micro.WithEndpointQueueGroupDisabled())
		}
		group := cfg.QueueGroup
		if e.Broadcast {
			group = ""
		}
		h := withGroup(RefuseReply(cfg.Logger, e.Handler), group)
		if err := svc.AddEndpoint(e.Name, h, opts...); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("%s: endpoint %s (%s): %w", cfg.Name, e.Name, e.Subject, err)
		}
		if e.Local {
			unregister = append(unregister, serveLocal(nc, e.Subject, h))
		}
	}
	if err := nc.FlushTimeout(flushTimeout); err != nil {
		_ = svc.Stop()
		for _, u := range unregister {
			u()
		}
		return nil, fmt.Errorf("%s: flushing subscriptions: %w", cfg.Name, err)
	}
	if len(unregister) == 0 {
		return svc, nil
	}
	return &localService{Service: svc, unregister: unregister}, nil
}

// localService is a service with Local endpoints: Stop ends their in-process
// hand-off before draining the subscriptions.
type localService struct {
	micro.Service
	once       sync.Once
	unregister []func()
}

func (s *localService) Stop() error {
	s.once.Do(func() {
		for _, u := range s.unregister {
			u()
		}
	})
	return s.Service.Stop()
}

// RefuseReply wraps h so that a request whose reply subject is not an inbox
// (IsInbox) is dropped with a log line before h sees it: nothing runs, and
// the responder publishes nothing where the sender could not publish
// itself. A request without a reply (a cancellation) passes.
func RefuseReply(log *slog.Logger, h micro.Handler) micro.Handler {
	if log == nil {
		log = slog.Default()
	}
	return micro.HandlerFunc(func(req micro.Request) {
		if r := req.Reply(); r != "" && !IsInbox(r) {
			log.Warn("request refused: its reply subject is not an inbox", "subject", req.Subject(), "reply", r)
			return
		}
		h.Handle(req)
	})
}

// InboxMsg is RefuseReply for a plain subscription's message: false (and a
// log line) when m has a reply subject that is not an inbox.
func InboxMsg(log *slog.Logger, m *nats.Msg) bool {
	if m.Reply == "" || IsInbox(m.Reply) {
		return true
	}
	if log == nil {
		log = slog.Default()
	}
	log.Warn("message refused: its reply subject is not an inbox", "subject", m.Subject, "reply", m.Reply)
	return false
}
