package audit

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Anchor is a chain's head as an earlier export saw it. Nothing in the
// stream links to a chain's newest record, so removing it (or the whole
// chain) leaves no broken link: only a head kept elsewhere shows it.
type Anchor struct {
	Seq  uint64    `json:"seq"`
	Hash string    `json:"hash"`
	Time time.Time `json:"time"`
}

// AnchorsOf are the heads of b's chains: per chain, its last record whose
// signature holds by a key of keys of the chain's role (a record the bundle
// could have forged anchors nothing).
func AnchorsOf(b *Bundle, keys Keys) map[string]Anchor {
	out := map[string]Anchor{}
	for _, e := range b.Entries {
		var r Record
		if json.Unmarshal(e.Data, &r) != nil || r.V != Version {
			continue
		}
		role, key, ok := SplitChain(r.Chain)
		if id, known := keys[key]; !ok || !known || id.Role != role || !r.checkSig() {
			continue
		}
		if a, seen := out[r.Chain]; !seen || r.Seq > a.Seq {
			out[r.Chain] = Anchor{Seq: r.Seq, Hash: fmt.Sprintf("%x", r.Digest()), Time: r.Time}
		}
	}
	return out
}

// checkAnchors says where the chains read lost or changed what the
// anchors saw: the anchored record must still be stored with its hash,
// unless it and all before it left by age (older than the retention).
func checkAnchors(chains map[string][]link, opts VerifyOptions) []Problem {
	var out []Problem
	names := make([]string, 0, len(opts.Anchors))
	for name := range opts.Anchors {
		names = append(names, name)
	}
	slices.Sort(names)
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	for _, name := range names {
		a := opts.Anchors[name]
		links := chains[name]
		var last link
		first := uint64(0)
		for _, l := range links {
			if l.seq == a.Seq && l.hash != a.Hash {
				out = append(out, Problem{StreamSeq: l.streamSeq, Chain: name, Seq: l.seq, Kind: Altered,
					Detail: fmt.Sprintf("record %d differs from the earlier export's (the chain was rewritten since)", a.Seq)})
			}
			if l.streamSeq > last.streamSeq {
				last = l
			}
			if first == 0 || l.seq < first {
				first = l.seq
			}
		}
		aged := opts.Retention > 0 && a.Time.Before(now.Add(-opts.Retention))
		switch {
		case len(links) == 0 && !aged:
			out = append(out, Problem{Chain: name, Seq: a.Seq, Kind: Missing,
				Detail: fmt.Sprintf("the chain is not stored, yet the earlier export holds its records to %d", a.Seq)})
		case len(links) > 0 && last.seq < a.Seq:
			out = append(out, Problem{StreamSeq: last.streamSeq, Chain: name, Seq: a.Seq, Kind: Missing,
				Detail: fmt.Sprintf("records %d to %d, which the earlier export holds, are not stored (the chain's newest records were removed)", last.seq+1, a.Seq)})
		case len(links) > 0 && first > a.Seq && !aged:
			out = append(out, Problem{StreamSeq: links[0].streamSeq, Chain: name, Seq: a.Seq, Kind: Missing,
				Detail: fmt.Sprintf("record %d, which the earlier export holds, is no longer stored though younger than the retention (removed, or pushed out by the size limit)", a.Seq)})
		}
	}
	return out
}
