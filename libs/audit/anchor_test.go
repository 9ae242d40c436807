package audit

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// Removing a chain's newest records (or the whole chain) leaves nothing
// that links to them: the stream alone verifies. An earlier export kept
// elsewhere anchors the heads it saw; verified against it, the removal is
// named, as is a chain rebuilt with its writer's seed.
func TestEarlierExportAnchorsTheHeads(t *testing.T) {
	orig, runnerKey := bundleAndKey(t, 12) // runner records 1–9, config 1–3
	keys := orig.Keys
	anchors := AnchorsOf(orig, keys)
	if len(anchors) != 2 {
		t.Fatalf("anchors %+v", anchors)
	}
	verify := func(entries []Entry, anchors map[string]Anchor) Report {
		v := NewVerifier(keys, VerifyOptions{FromStart: true, Anchors: anchors})
		for _, e := range entries {
			v.Add(e)
		}
		return v.Report()
	}
	runner, config := chainOfEntry(t, orig.Entries[0]), chainOfEntry(t, orig.Entries[3])
	// chain's records from `from` removed, the stream's sequences
	// renumbered (a store rewritten, else the gap shows: gap_test.go).
	without := func(chain string, from uint64) []Entry {
		var out []Entry
		for _, e := range orig.Entries {
			var r Record
			_ = json.Unmarshal(e.Data, &r)
			if r.Chain != chain || r.Seq < from {
				e.StreamSeq = uint64(len(out) + 1)
				out = append(out, e)
			}
		}
		return out
	}
	// Untouched, and grown since: verified.
	if rep := verify(orig.Entries, anchors); !rep.OK() {
		t.Fatalf("untouched: %v", rep.Problems)
	}
	if rep := verify(without(runner, 8), nil); !rep.OK() {
		t.Fatalf("without anchors a truncation is expected to pass unseen: %v", rep.Problems)
	}
	for name, tc := range map[string]struct {
		entries []Entry
		chain   string
		kind    string
	}{
		"tail removed":   {without(runner, 8), runner, Missing},
		"chain removed":  {without(config, 1), config, Missing},
		"rebuilt chains": {rebuilt(t, orig, runnerKey, runner, 5), runner, Altered},
	} {
		rep := verify(tc.entries, anchors)
		if p, ok := rep.FirstProblem(tc.chain); !ok || p.Kind != tc.kind {
			t.Errorf("%s: problems %v, want %s of %s", name, rep.Problems, tc.kind, tc.chain)
		}
	}
	// Records older than the retention left by age: no fault.
	old := map[string]Anchor{config: {Seq: 3, Hash: anchors[config].Hash, Time: time.Now().Add(-2 * time.Hour)}}
	v := NewVerifier(keys, VerifyOptions{Anchors: old, Retention: time.Hour})
	for _, e := range without(config, 1) {
		v.Add(e)
	}
	if rep := v.Report(); !rep.OK() {
		t.Fatalf("aged out: %v", rep.Problems)
	}
}

func chainOfEntry(t *testing.T, e Entry) string {
	var r Record
	if err := json.Unmarshal(e.Data, &r); err != nil {
		t.Fatal(err)
	}
	return r.Chain
}

// rebuilt is what an operator holding the runner's seed could store: the
// runner's chain re-signed from record `from` on, with other events.
func rebuilt(t *testing.T, b *Bundle, kp nkeys.KeyPair, chain string, from uint64) []Entry {
	t.Helper()
	out := make([]Entry, len(b.Entries))
	copy(out, b.Entries)
	prev := ""
	for i, e := range out {
		var r Record
		_ = json.Unmarshal(e.Data, &r)
		if r.Chain != chain {
			continue
		}
		if r.Seq >= from {
			r.Prev = prev
			r.Events[0].Event = json.RawMessage(`{"server":"echo","ok":true,"rebuilt":true}`)
			if err := r.seal(kp); err != nil {
				t.Fatal(err)
			}
			out[i].Data, _ = json.Marshal(r)
		}
		prev = r.Hash
	}
	return out
}
