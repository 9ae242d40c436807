package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
)

// A record verifies only as its writer stored it: a second "EVENTS" key
// (encoding/json matches keys case-insensitively and keeps the last) could
// carry the signed events to the verifier while every other reader of the
// stream or a bundle (jq, a SIEM) reads the forged "events" first.
func TestRecordVerifiesOnlyAsStored(t *testing.T) {
	b := bundleOf(t, 4)
	e := &b.Entries[1]
	var r Record
	if err := json.Unmarshal(e.Data, &r); err != nil {
		t.Fatal(err)
	}
	signed, _ := json.Marshal(r.Events)
	forged := []byte(`[{"subject":"mcp.v1.events.call.echo","event":{"server":"echo","ok":false}}]`)
	data := bytes.Replace(e.Data, signed, forged, 1)
	e.Data = append(data[:len(data)-1], []byte(`,"EVENTS":`+string(signed)+`}`)...)
	var seen map[string]json.RawMessage
	if err := json.Unmarshal(e.Data, &seen); err != nil || !bytes.Equal(seen["events"], forged) {
		t.Fatalf("the forged record does not read as forged: %v %s", err, seen["events"])
	}
	rep := b.Verify()
	if rep.OK() || rep.Problems[0].Kind != Altered || rep.Problems[0].StreamSeq != e.StreamSeq {
		t.Fatalf("a record read otherwise than signed verified: %v", rep.Problems)
	}
}

// An event holding <, > or & verifies: the writer signs the bytes it
// stores (encoding/json writes them as \u003c…).
func TestEventWithHTMLCharactersVerifies(t *testing.T) {
	nc, js := bed(t)
	kp, pub := newKey(t)
	w := writer(t, nc, "runner", kp)
	if err := w.Write(context.Background(), prefix+".events.call.echo", []byte(`{"args":"<b>a & b</b>","sep":"`+"\u2028"+`"}`)); err != nil {
		t.Fatal(err)
	}
	w.Append(prefix+".events.call.echo", []byte(`{"q":"x > y"}`))
	w.Close(5e9)
	if rep, _ := read(t, js, Keys{pub: {Name: "runner", Role: "runner"}}, From{}); !rep.OK() || rep.Records != 2 {
		t.Fatalf("records %d: %v", rep.Records, rep.Problems)
	}
}
