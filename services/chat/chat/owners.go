package chat

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/principal"
)

// Conversations belong to the principal whose send first named them: the key owner.<conversation> of bus.BucketChatTurns, created
// once (compare-and-set, so two first sends cannot both win) and removed
// with the conversation. Anyone else gets the NOT_FOUND of a conversation
// that does not exist: its existence is private too. Admins may list, read
// and delete every conversation (audited as_admin) but not act inside
// another's (send, cancel, approve, answer). A conversation stored before
// owners existed has no key: only admins and the operator reach it.

const ownerPrefix = "owner."

func ownerKey(conv string) string { return ownerPrefix + conv }

type ownerValue struct {
	Principal string    `json:"principal"`
	Since     time.Time `json:"since"`
	// After is the last MCP_EVENTS sequence on the conversation's events
	// subject when it was claimed: those up to it are an earlier owner's,
	// of a conversation deleted since, and stay theirs (the gateway streams
	// only later ones).
	After uint64 `json:"after,omitempty"`
	// Charged is what the owner is charged for the conversation's log
	// (quota.go).
	Charged int64 `json:"charged,omitempty"`
	// Refunded is set by a delete that gave the charge back: the charge
	// is no more the owner's, and the end of a turn the delete cancelled
	// charges nothing (quota.go).
	Refunded bool `json:"refunded,omitempty"`
}

// What a caller wants of a conversation.
type use int

const (
	useRead   use = iota // history, pending, events
	useAct               // send, cancel, approve, answer
	useDelete            // delete
)

// caller is the principal of a request (the operator when ctx has none:
// a direct call inside the process).
func caller(ctx context.Context) principal.Principal {
	if p, ok := principal.From(ctx); ok {
		return p
	}
	return principal.Operator()
}

// notFound is the error of a conversation the caller may not know of,
// worded as the log's own.
func notFound(conv string) error {
	return apierr.Newf(apierr.NotFound, "conversation %s not found", conv)
}

// ownerOf reads a conversation's owner ("" and false: none).
func (s *Service) ownerOf(ctx context.Context, conv string) (string, bool, error) {
	v, found, err := s.ownerRecord(ctx, conv)
	return v.Principal, found, err
}

// ownerRecord is conv's owner record (found false: nobody's).
func (s *Service) ownerRecord(ctx context.Context, conv string) (ownerValue, bool, error) {
	e, err := s.turns.Get(ctx, ownerKey(conv))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ownerValue{}, false, nil
	}
	if err != nil {
		return ownerValue{}, false, apierr.Wrap(apierr.ServiceUnavailable, "reading the owner of conversation "+conv, err)
	}
	var v ownerValue
	if json.Unmarshal(e.Value(), &v) != nil || v.Principal == "" {
		return ownerValue{}, false, apierr.Newf(apierr.Internal, "the owner record of conversation %s is unreadable", conv)
	}
	return v, true, nil
}

// lastEvent is the MCP_EVENTS sequence of conv's newest retained event (0:
// none, or no events stream yet).
func (s *Service) lastEvent(ctx context.Context, conv string) (uint64, error) {
	stream, err := s.js.Stream(ctx, bus.StreamEvents)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, apierr.Wrap(apierr.ServiceUnavailable, "reading the events stream", err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, s.subj.Event("chat", conv))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, apierr.Wrap(apierr.ServiceUnavailable, "reading the last event of conversation "+conv, err)
	}
	return m.Sequence, nil
}

// access refuses (NOT_FOUND) a use of conv its caller may not make, and
// returns the owner and whether an admin acts on another's conversation.
func (s *Service) access(ctx context.Context, conv string, u use) (owner string, asAdmin bool, err error) {
	if e := checkConversation(conv); e != nil {
		return "", false, e
	}
	p := caller(ctx)
	owner, found, err := s.ownerOf(ctx, conv)
	if err != nil {
		return "", false, err
	}
	switch {
	case p.Kind == principal.KindOperator:
		return owner, false, nil
	case found && owner == p.ID:
		return owner, false, nil
	case p.Admin && (!found || u != useAct):
		return owner, found, nil
	}
	return "", false, notFound(conv)
}

// claim makes conv the caller's when nobody has it yet, and refuses
// (NOT_FOUND) when it is another's. A conversation stored before owners
// existed stays ownerless: only admins continue it.
func (s *Service) claim(ctx context.Context, conv string) (string, error) {
	p := caller(ctx)
	for range 3 {
		owner, found, err := s.ownerOf(ctx, conv)
		if err != nil {
			return "", err
		}
		if found {
			if owner == p.ID || p.Kind == principal.KindOperator {
				return owner, nil
			}
			return "", notFound(conv)
		}
		entries, err := s.convs.Read(ctx, conv)
		if err != nil && apierr.Of(err) != apierr.NotFound {
			return "", err
		}
		if len(entries) > 0 {
			if p.Admin {
				return "", nil
			}
			return "", notFound(conv)
		}
		after, err := s.lastEvent(ctx, conv)
		if err != nil {
			return "", err
		}
		val, _ := json.Marshal(ownerValue{Principal: p.ID, Since: time.Now().UTC(), After: after})
		if _, err := s.turns.Create(ctx, ownerKey(conv), val); err == nil {
			return p.ID, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return "", apierr.Wrap(apierr.ServiceUnavailable, "recording the owner of conversation "+conv, err)
		}
		// Another first send won the race: read whose it is now.
	}
	return "", apierr.Newf(apierr.Conflict, "conversation %s is being created by another request", conv)
}

// forgetOwner drops a deleted conversation's owner.
func (s *Service) forgetOwner(ctx context.Context, conv string) {
	if err := s.turns.Purge(ctx, ownerKey(conv)); err != nil {
		s.log.Warn("chat: forgetting the owner of a deleted conversation failed", "conversation", conv, "err", err)
	}
}

// profileVisible: an owned profile is its owner's and admins' only.
func profileVisible(p model.Profile, c principal.Principal) bool {
	return p.Owner == "" || p.Owner == c.ID || c.Admin
}

// audit publishes who did what to a conversation (never its text).
func (s *Service) audit(ctx context.Context, action, conv, owner, turn string, asAdmin bool) {
	ev := model.ChatAuditEvent{Action: action, Conversation: conv, Principal: caller(ctx).ID, Owner: owner,
		AsAdmin: asAdmin, Turn: turn, At: time.Now().UTC()}
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	s.opts.Audit.Append(s.subj.Event("chat", conv)+".audit", data)
	if err := s.nc.Publish(s.subj.Event("chat", conv)+".audit", data); err != nil {
		s.log.Warn("chat: publishing an audit event failed", "conversation", conv, "err", err)
	}
}

func checkConversation(conv string) *apierr.Error {
	ref := model.ChatConversationRef{Conversation: conv}
	return ref.Validate()
}
