package credential

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strings"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
	"github.com/mcpbus/mcpbus/libs/secretscan/fingerprint"
	"github.com/mcpbus/mcpbus/services/credential/store"
)

// VerbFingerprints answers runners the fingerprint feed: the keyed
// fingerprints of every stored secret value, so that a runner blocks a
// secret of a server it does not run (docs/security.md).
const VerbFingerprints = credclient.VerbFingerprints

// feedKeyLabel derives the feed's fingerprint key from the service's curve seed:
// every instance holds the same pair, so all make the same fingerprints,
// and no key is stored besides it.
const feedKeyLabel = "mcpbus secret fingerprints v1"

// handleFingerprints answers the fingerprint feed sealed to the requester's
// key (only runners may publish on cred.fingerprints: libs/access). The
// feed holds fingerprints and the key they were made under; a runner can
// test a guess against them, as its scan does, but not read a value back.
func (s *Service) handleFingerprints(ctx context.Context, data []byte) (string, any, error) {
	var in model.CredFingerprintsRequest
	if err := bus.Decode(data, &in); err != nil {
		return "", nil, err
	}
	if err := checkRecipient(in.RecipientKey); err != nil {
		return "", nil, err
	}
	kp, pub, err := s.keys.get(ctx)
	if err != nil {
		return "", nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return "", nil, apierr.Wrap(apierr.Internal, "reading the curve seed", err)
	}
	mac := hmac.New(sha256.New, seed)
	mac.Write([]byte(feedKeyLabel))
	key := mac.Sum(nil)
	clear(seed)
	feed, err := s.feed(ctx, key)
	if err != nil {
		return "", nil, err
	}
	plain, err := json.Marshal(feed)
	if err != nil {
		return "", nil, apierr.Wrap(apierr.Internal, "encoding the fingerprint feed", err)
	}
	sealed, err := kp.Seal(plain, in.RecipientKey)
	clear(plain)
	if err != nil {
		return "", nil, apierr.Wrap(apierr.Validation, "cannot seal to recipient_key", err).WithField("recipient_key")
	}
	if feed.Truncated {
		s.log.Warn("the fingerprint feed is truncated: the store holds more secret values than a feed carries",
			"max", s.opts.MaxFingerprints, "records", feed.Records)
	}
	return "", model.SealedReply{SenderKey: pub, Sealed: sealed}, nil
}

// feed fingerprints every value of every record under key: env values,
// headers (and the token after a scheme: a child may print it alone),
// OAuth access and refresh tokens and client secrets. Keyfiles are paths:
// their contents live on runner hosts, not here. At most MaxFingerprints
// (Options).
func (s *Service) feed(ctx context.Context, key []byte) (model.FingerprintFeed, error) {
	lister, ok := s.store.(store.Lister)
	if !ok {
		return model.FingerprintFeed{}, apierr.Newf(apierr.Internal, "the %s credential store cannot list its records", s.store.Name())
	}
	keys, err := lister.List(ctx)
	if err != nil {
		return model.FingerprintFeed{}, err
	}
	slices.Sort(keys) // a truncated feed keeps the same records every time
	m := fingerprint.New(key)
	seen := map[fingerprint.Sum]struct{}{}
	lens := map[int]struct{}{}
	out := model.FingerprintFeed{Alg: fingerprint.Alg, Key: key, At: s.opts.Now().UTC()}
	add := func(v string) {
		for _, f := range fingerprint.Forms(v) {
			sum := m.Of([]byte(f))
			if _, dup := seen[sum]; dup {
				continue
			}
			if len(seen) == s.opts.MaxFingerprints {
				out.Truncated = true
				return
			}
			seen[sum] = struct{}{}
			lens[len(f)] = struct{}{}
			out.Sums = append(out.Sums, sum[:]...)
		}
	}
	principals := store.Key(model.CredPrincipal, "")
	for _, k := range keys {
		if strings.HasSuffix(k, KeyRecordID) { // the service's own key pair
			continue
		}
		// A principal's own record is what any key may write, any values
		// (PUT /api/v1/me/authorizations): in the feed they would block
		// every other caller's arguments that hold them ("function") and
		// crowd the servers' values out past MaxFingerprints. Those
		// credentials travel only on their principal's own upstream
		// session, never another's.
		if strings.HasPrefix(k, principals) {
			continue
		}
		rec, _, err := s.store.Get(ctx, k)
		if err != nil {
			if ctx.Err() != nil {
				return model.FingerprintFeed{}, apierr.Wrap(apierr.Network, "reading the credential records took too long", ctx.Err())
			}
			// Removed since the listing, or unreadable: the rest still count.
			s.log.Warn("a credential record was left out of the fingerprint feed", "key", k, "code", apierr.Of(err))
			continue
		}
		out.Records++
		for _, v := range rec.Env {
			add(v)
		}
		for _, v := range rec.Headers {
			add(v)
			if _, token, ok := strings.Cut(v, " "); ok {
				add(strings.TrimSpace(token))
			}
		}
		if o := rec.OAuth; o != nil {
			add(o.AccessToken)
			add(o.RefreshToken)
			add(o.ClientSecret)
		}
	}
	for n := range lens {
		out.Lengths = append(out.Lengths, n)
	}
	slices.Sort(out.Lengths)
	return out, nil
}
