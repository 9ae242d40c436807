package credential

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/bus"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
)

// OAuthName is the name that deletes the OAuth token in a delete request.
const OAuthName = "oauth"

func (s *Service) handleSet(ctx context.Context, data []byte) (string, any, error) {
	var in model.CredSetRequest
	if err := bus.Decode(data, &in); err != nil {
		return "", nil, err
	}
	r, err := checkRef(in.Kind, in.ServerID)
	if err != nil {
		return "", nil, err
	}
	id := in.ServerID
	if err := checkFor(r, in.For); err != nil {
		return id, nil, err
	}
	given, err := s.unseal(ctx, &in)
	if err != nil {
		return id, nil, err
	}
	if given.Empty() && !in.Replace {
		return id, nil, apierr.Invalid("credentials", "no credentials given (env, headers, keyfiles or oauth)")
	}
	if e := validateCredentials(given); e != nil {
		return id, nil, e
	}
	unlock, err := s.locks.lock(ctx, r.key())
	if err != nil {
		return id, nil, err
	}
	defer unlock()
	change := func(rec model.Credentials) (model.Credentials, error) {
		rec = merge(rec, given)
		if in.For != nil {
			rec.Owner = in.For.ServerID
		}
		if e := checkRecord(rec); e != nil {
			return model.Credentials{}, e
		}
		return rec, nil
	}
	if in.DryRun {
		var rec model.Credentials
		if !in.Replace {
			if rec, err = s.get(ctx, r); err != nil {
				return id, nil, err
			}
		}
		if rec, err = change(rec); err != nil {
			return id, nil, err
		}
		return id, s.describe(r, rec, s.opts.Now().UTC()), nil
	}
	var rec model.Credentials
	if in.Replace {
		// Nothing read: a replace also overwrites a record that no longer
		// opens, and the last replace wins.
		if rec, err = change(model.Credentials{}); err == nil {
			err = s.write(ctx, r, rec)
		}
	} else {
		rec, err = s.update(ctx, r, change)
	}
	if err != nil {
		return id, nil, err
	}
	s.changed(r, VerbSet)
	return id, s.describe(r, rec, s.opts.Now().UTC()), nil
}

// checkFor checks a set request's for: only on a principal's record, and
// naming the server and principal whose record r is.
func checkFor(r ref, f *model.PrincipalOf) error {
	if f == nil {
		return nil
	}
	if r.kind != model.CredPrincipal {
		return apierr.Invalid("for", "for names the server and principal of a principal's record (kind principal)")
	}
	if err := checkID(f.ServerID); err != nil {
		return apierr.From(err).WithField("for.server_id")
	}
	if err := checkPrincipal(f.Principal); err != nil || f.Principal == "" {
		return apierr.Invalid("for.principal", "for.principal must be a principal id (at most 512 printable characters)")
	}
	if model.PrincipalCredentialID(f.ServerID, f.Principal) != r.id {
		return apierr.Invalid("for", "server_id is not the record of for's server and principal (model.PrincipalCredentialID)")
	}
	return nil
}

// unseal opens the secrets of a set request. Secrets in clear are refused:
// they have crossed the bus readable by anyone on it. A blob that does not
// open makes the service read its key pair again once (another instance may
// have made the pair the writer sealed to) before it is refused.
func (s *Service) unseal(ctx context.Context, in *model.CredSetRequest) (model.Credentials, error) {
	keySubject := s.subj.Service("cred", VerbKey)
	if !in.Credentials.Empty() {
		return model.Credentials{}, credclient.ClearRefused("credentials", keySubject)
	}
	if len(in.Sealed) == 0 {
		if in.SenderKey != "" {
			return model.Credentials{}, apierr.Invalid("sealed", "sender_key without sealed")
		}
		if in.Names != nil && !in.Names.Empty() {
			return model.Credentials{}, apierr.Invalid("names", "names given but nothing sealed")
		}
		return model.Credentials{}, nil
	}
	kp, _, err := s.keys.get(ctx)
	if err != nil {
		return model.Credentials{}, err
	}
	creds, err := credclient.Open(kp, in.Sealed, in.SenderKey, credclient.FieldSealed, keySubject)
	if credclient.StaleKey(err) && s.keys.reload(ctx) {
		if kp, _, kerr := s.keys.get(ctx); kerr == nil {
			creds, err = credclient.Open(kp, in.Sealed, in.SenderKey, credclient.FieldSealed, keySubject)
		}
	}
	if err != nil {
		return model.Credentials{}, err
	}
	if in.Names != nil && !sameNames(*in.Names, creds.Names()) {
		return model.Credentials{}, apierr.Invalid("names", "names do not match the secrets sealed")
	}
	return creds, nil
}

// sameNames compares two name lists (each list's order does not matter).
func sameNames(a, b model.SecretNames) bool {
	eq := func(x, y []string) bool {
		x, y = slices.Clone(x), slices.Clone(y)
		slices.Sort(x)
		slices.Sort(y)
		return slices.Equal(x, y)
	}
	if !eq(a.Env, b.Env) || !eq(a.Headers, b.Headers) || !eq(a.Keyfiles, b.Keyfiles) {
		return false
	}
	if (a.OAuth == nil) != (b.OAuth == nil) {
		return false
	}
	return a.OAuth == nil || *a.OAuth == *b.OAuth
}

// handleKey answers the service's public curve key.
func (s *Service) handleKey(ctx context.Context, data []byte) (string, any, error) {
	var in model.CredKeyRequest
	if err := bus.Decode(data, &in); err != nil {
		return "", nil, err
	}
	pub, err := s.PublicKey(ctx)
	if err != nil {
		return "", nil, err
	}
	return "", model.CredKeyReply{PublicKey: pub}, nil
}

// merge adds the entries of add to rec. An env var given as a value replaces
// its keyfile and the other way round (both feed the same variable); a new
// OAuth token replaces the old one.
func merge(rec, add model.Credentials) model.Credentials {
	out := model.Credentials{
		Env: maps.Clone(rec.Env), Headers: maps.Clone(rec.Headers), Keyfiles: maps.Clone(rec.Keyfiles), OAuth: rec.OAuth,
		Owner: rec.Owner,
	}
	put := func(m *map[string]string, k, v string) {
		if *m == nil {
			*m = map[string]string{}
		}
		(*m)[k] = v
	}
	for k, v := range add.Env {
		delete(out.Keyfiles, k)
		put(&out.Env, k, v)
	}
	for k, v := range add.Keyfiles {
		delete(out.Env, k)
		put(&out.Keyfiles, k, v)
	}
	for k, v := range add.Headers {
		// Header names are case-insensitive: Authorization replaces authorization.
		for old := range out.Headers {
			if strings.EqualFold(old, k) {
				delete(out.Headers, old)
			}
		}
		put(&out.Headers, k, v)
	}
	if add.OAuth != nil {
		t := *add.OAuth
		t.Scopes = slices.Clone(t.Scopes)
		out.OAuth = &t
	}
	return out
}

func (s *Service) handleDelete(ctx context.Context, data []byte) (string, any, error) {
	var in model.CredDeleteRequest
	if err := bus.Decode(data, &in); err != nil {
		return "", nil, err
	}
	r, err := checkRef(in.Kind, in.ServerID)
	if err != nil {
		return "", nil, err
	}
	id := in.ServerID
	for i, n := range in.Names {
		if n == "" {
			return id, nil, apierr.Invalid(fmt.Sprintf("names[%d]", i), "a name is empty")
		}
	}
	if in.Principals && (r.kind != model.CredServer || len(in.Names) > 0) {
		return id, nil, apierr.Invalid("principals", "principals goes with the delete of a server's whole record (kind server, no names)")
	}
	unlock, err := s.locks.lock(ctx, r.key())
	if err != nil {
		return id, nil, err
	}
	defer unlock()
	if len(in.Names) == 0 {
		if err := s.removeWhole(ctx, r, in.Principals); err != nil {
			return id, nil, err
		}
		s.changed(r, VerbDelete)
		return id, s.describe(r, model.Credentials{}, time.Time{}), nil
	}
	rec, err := s.update(ctx, r, func(rec model.Credentials) (model.Credentials, error) {
		rec, missing := remove(rec, in.Names)
		if len(missing) > 0 {
			// Nothing is removed unless every name is there: a typo must
			// not half-apply a delete.
			return model.Credentials{}, &apierr.Error{Code: apierr.NotFound, Field: "names",
				Message: fmt.Sprintf("server %s has no stored credential named %s", id, strings.Join(quoteAll(missing), ", "))}
		}
		return rec, nil
	})
	if err != nil {
		return id, nil, err
	}
	s.changed(r, VerbDelete)
	var updated time.Time
	if !rec.Empty() {
		updated = s.opts.Now().UTC()
	}
	return id, s.describe(r, rec, updated), nil
}

// remove drops the named env vars, headers (case-insensitively), keyfiles and
// "oauth"; it reports the names that matched nothing.
func remove(rec model.Credentials, names []string) (model.Credentials, []string) {
	out := model.Credentials{Env: maps.Clone(rec.Env), Headers: maps.Clone(rec.Headers), Keyfiles: maps.Clone(rec.Keyfiles), OAuth: rec.OAuth, Owner: rec.Owner}
	var missing []string
	for _, n := range names {
		found := false
		if _, ok := out.Env[n]; ok {
			delete(out.Env, n)
			found = true
		}
		if _, ok := out.Keyfiles[n]; ok {
			delete(out.Keyfiles, n)
			found = true
		}
		for h := range out.Headers {
			if strings.EqualFold(h, n) {
				delete(out.Headers, h)
				found = true
			}
		}
		if out.OAuth != nil && (n == OAuthName || n == out.OAuth.EnvVar || (out.OAuth.Header != "" && strings.EqualFold(n, out.OAuth.Header))) {
			out.OAuth = nil
			found = true
		}
		if !found && !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	return out, missing
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("%q", n)
	}
	return out
}

func (s *Service) handleDescribe(ctx context.Context, data []byte) (string, any, error) {
	var in model.CredDescribeRequest
	if err := bus.Decode(data, &in); err != nil {
		return "", nil, err
	}
	r, err := checkRef(in.Kind, in.ServerID)
	if err != nil {
		return "", nil, err
	}
	// Reading may move a record stored before kinds: hold its lock.
	unlock, err := s.locks.lock(ctx, r.key())
	if err != nil {
		return r.id, nil, err
	}
	defer unlock()
	rec, updated, err := s.getUpdated(ctx, r)
	if err != nil {
		return r.id, nil, err
	}
	return r.id, s.describe(r, rec, updated), nil
}

// describe lists what rec holds, names only (lists are never null).
func (s *Service) describe(r ref, rec model.Credentials, updated time.Time) model.CredDescription {
	d := model.CredDescription{
		ServerID: r.id, Kind: r.kind, Backend: s.store.Name(),
		Env: sortedKeys(rec.Env), Headers: sortedKeys(rec.Headers), Keyfiles: sortedKeys(rec.Keyfiles),
		UpdatedAt: updated,
	}
	if rec.Empty() {
		d.UpdatedAt = time.Time{}
	}
	if o := rec.OAuth; o != nil {
		d.OAuth = &model.OAuthDescription{
			Provider: o.Provider, ExpiresAt: o.ExpiresAt, HasRefreshToken: o.RefreshToken != "",
			Scopes: slices.Clone(o.Scopes), EnvVar: o.EnvVar, Header: o.Header,
		}
	}
	return d
}

// Unseal opens a blob sealed to the service's key (in process only: tests
// check what crossed the bus sealed; nothing on the bus answers with it).
func (s *Service) Unseal(ctx context.Context, sealed []byte, senderKey string) (model.Credentials, error) {
	kp, _, err := s.keys.get(ctx)
	if err != nil {
		return model.Credentials{}, err
	}
	return credclient.Open(kp, sealed, senderKey, credclient.FieldSealed, s.subj.Service("cred", VerbKey))
}

// chatProfileOnly is h for requests about a chat profile's key alone (the
// chat identity's verbs): any other kind is refused before h reads it.
func chatProfileOnly(h handler) handler {
	return func(ctx context.Context, data []byte) (string, any, error) {
		var in struct {
			Kind model.CredentialKind `json:"kind"`
		}
		if err := json.Unmarshal(data, &in); err != nil || in.Kind != model.CredChatProfile {
			return "", nil, apierr.Invalid("kind", "this subject takes chat profile keys only (kind "+string(model.CredChatProfile)+")")
		}
		return h(ctx, data)
	}
}
