package credclient_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/mcpbus/mcpbus/libs/apierr"
	"github.com/mcpbus/mcpbus/libs/credclient"
	"github.com/mcpbus/mcpbus/libs/model"
)

// fuzzKey is the credential service's pair in the fuzz targets (fixed, so
// that the corpus keeps meaning the same).
func fuzzKey(tb testing.TB) (nkeys.KeyPair, string) {
	tb.Helper()
	kp, err := nkeys.FromCurveSeed([]byte("SXADAX557LXJQH2JW67MBJADWQEGELPMZJASIL7UBOFS64X23U3KSXKHMM"))
	if err != nil {
		tb.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}

// checkRefusal: every failure to open is a VALIDATION_ERROR on the blob or
// the sender key.
func checkRefusal(t *testing.T, err error) {
	t.Helper()
	var e *apierr.Error
	if !errors.As(err, &e) || e.Code != apierr.Validation || (e.Field != credclient.FieldSealed && e.Field != credclient.FieldSenderKey) {
		t.Fatalf("want a VALIDATION_ERROR on sealed or sender_key, got %#v", err)
	}
}

// FuzzOpen feeds the unsealing decoder arbitrary blobs and sender keys.
func FuzzOpen(f *testing.F) {
	kp, pub := fuzzKey(f)
	good, sender, err := credclient.Seal(model.Credentials{Env: map[string]string{"API_KEY": "s3cret"}}, pub)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, sender)
	tampered := append([]byte(nil), good...)
	tampered[len(tampered)-1] ^= 1
	f.Add(tampered, sender)
	f.Add(good[:len(good)/2], sender)
	f.Add([]byte("xkv1"), sender)
	f.Add([]byte{}, sender)
	f.Add(good, "")
	f.Add(good, pub)
	f.Add([]byte("not sealed at all"), "XNOTAKEY")
	f.Fuzz(func(t *testing.T, sealed []byte, senderKey string) {
		creds, err := credclient.Open(kp, sealed, senderKey, credclient.FieldSealed, "mcp.v1.cred.key")
		if err != nil {
			checkRefusal(t, err)
			return
		}
		// Whatever opens re-seals and opens to the same credentials.
		again, s2, err := credclient.Seal(creds, pub)
		if err != nil {
			t.Fatal(err)
		}
		back, err := credclient.Open(kp, again, s2, credclient.FieldSealed, "mcp.v1.cred.key")
		if err != nil || !reflect.DeepEqual(back, creds) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, back, creds)
		}
	})
}

// FuzzOpenPlain seals arbitrary plain text to the service's key: the
// decoder behind the seal accepts exactly one credentials object, and a
// refusal never quotes the plain text.
func FuzzOpenPlain(f *testing.F) {
	kp, pub := fuzzKey(f)
	f.Add([]byte(`{"env":{"API_KEY":"s3cret"}}`))
	f.Add([]byte(`{"env":{"API_KEY":"s3cret"}}{"env":{}}`))
	f.Add([]byte(`{"env":{"API_KEY":"s3cret"},"values":true}`))
	f.Add([]byte(`{"oauth":{"access_token":"tok","env_var":"T","expires_at":"2025-01-01T00:00:00Z"}}`))
	f.Add([]byte(`{"headers":{"Authorization":"Bearer x"},"keyfiles":{"K":"/k"}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"env":{"A":1}}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, plain []byte) {
		sender, err := nkeys.CreateCurveKeys()
		if err != nil {
			t.Fatal(err)
		}
		senderPub, _ := sender.PublicKey()
		sealed, err := sender.Seal(plain, pub)
		if err != nil {
			t.Fatal(err)
		}
		creds, err := credclient.Open(kp, sealed, senderPub, credclient.FieldSealed, "mcp.v1.cred.key")
		if err != nil {
			checkRefusal(t, err)
			if len(plain) >= 4 && bytes.Contains([]byte(apierr.From(err).Message), plain) {
				t.Fatalf("the refusal quotes the plain text: %s", apierr.From(err).Message)
			}
			return
		}
		// What was accepted is valid JSON of credentials.
		var check model.Credentials
		if err := json.Unmarshal(plain, &check); err != nil {
			t.Fatalf("accepted plain text that is not credentials JSON: %q", plain)
		}
		if !reflect.DeepEqual(check, creds) {
			t.Fatalf("decoded %+v, json.Unmarshal %+v", creds, check)
		}
	})
}

// FuzzSealRoundTrip: anything sealed with Seal opens to the same credentials,
// and only with the service's key.
func FuzzSealRoundTrip(f *testing.F) {
	kp, pub := fuzzKey(f)
	other, _ := nkeys.CreateCurveKeys()
	f.Add("API_KEY", "s3cret", "Authorization", "Bearer t", "tok")
	f.Add("", "", "", "", "")
	f.Add("A=B", "\x00", "X Y", "\r\n", "\xff")
	f.Fuzz(func(t *testing.T, envName, envValue, header, headerValue, token string) {
		in := model.Credentials{Env: map[string]string{envName: envValue}, Headers: map[string]string{header: headerValue}}
		if token != "" {
			in.OAuth = &model.OAuthToken{AccessToken: token, EnvVar: envName}
		}
		sealed, sender, err := credclient.Seal(in, pub)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(sealed, []byte(`"env"`)) {
			t.Fatal("the sealed blob shows its JSON")
		}
		out, err := credclient.Open(kp, sealed, sender, credclient.FieldSealed, "mcp.v1.cred.key")
		if err != nil {
			t.Fatal(err)
		}
		// JSON turns invalid UTF-8 into U+FFFD: compare with what it carries.
		var want model.Credentials
		raw, _ := json.Marshal(in)
		_ = json.Unmarshal(raw, &want)
		if !reflect.DeepEqual(out, want) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", out, want)
		}
		if _, err := credclient.Open(other, sealed, sender, credclient.FieldSealed, "mcp.v1.cred.key"); err == nil {
			t.Fatal("another key opened the blob")
		} else {
			checkRefusal(t, err)
		}
	})
}
