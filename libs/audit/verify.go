package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Entry is one stored message of the audit stream.
type Entry struct {
	StreamSeq uint64          `json:"stream_seq"`
	Subject   string          `json:"subject"`
	Data      json.RawMessage `json:"data"`
}

// What is wrong with a link (Problem.Kind).
const (
	Altered      = "altered"       // content differs from what was signed and chained
	Missing      = "missing"       // a record of the chain is not in the stream
	Reordered    = "reordered"     // a record is stored out of its chain's order
	BadSignature = "bad signature" // content is what the chain links, its signature is not the key's
	UnknownKey   = "unknown key"   // the chain's key is not a known identity of its role
	Malformed    = "malformed"     // not a record
	Unprotected  = "unprotected"   // the stream's settings let records be deleted
)

// Problem is one broken link.
type Problem struct {
	StreamSeq uint64 `json:"stream_seq"`
	Chain     string `json:"chain"`
	Seq       uint64 `json:"seq,omitempty"`
	Kind      string `json:"kind"`
	Detail    string `json:"detail"`
}

func (p Problem) String() string {
	return fmt.Sprintf("stream seq %d, chain %s, record %d: %s: %s", p.StreamSeq, p.Chain, p.Seq, p.Kind, p.Detail)
}

// ChainSummary is what was verified of one chain.
type ChainSummary struct {
	Chain    string `json:"chain"`
	Identity string `json:"identity,omitempty"`
	First    uint64 `json:"first"`
	Last     uint64 `json:"last"`
	Records  int    `json:"records"`
	// LastStreamSeq is the stream sequence of its last record read.
	LastStreamSeq uint64 `json:"last_stream_seq"`
}

// Report is the outcome of a verification; Problems are in stream order,
// the first is the first broken link.
type Report struct {
	Records  int            `json:"records"`
	Events   int            `json:"events"`
	Chains   []ChainSummary `json:"chains"`
	Problems []Problem      `json:"problems"`
}

// OK says whether every chain and signature checked out.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// FirstProblem is the first broken link of chain (stream order), if any.
func (r Report) FirstProblem(chain string) (Problem, bool) {
	for _, p := range r.Problems {
		if p.Chain == chain {
			return p, true
		}
	}
	return Problem{}, false
}

// VerifyOptions say where verification starts.
type VerifyOptions struct {
	// FromStart says the entries begin at the stream's first record ever
	// (nothing aged out, no --from): a chain must then start at record 1,
	// else its first records are missing. Otherwise a chain's first record
	// seen is its anchor.
	FromStart bool
	// Anchors are the chains' heads an earlier export saw (AnchorsOf):
	// each must still be stored with its hash, and so every record before
	// it, unless older than Retention (the stream's max age; 0: none
	// leaves by age). Only for a reading from the stream's first stored
	// record (no --from).
	Anchors   map[string]Anchor
	Retention time.Duration
	// Now is when records' ages are taken (zero: time.Now).
	Now time.Time
}

// link is what verification keeps of a record.
type link struct {
	streamSeq uint64
	seq       uint64
	hash      string // recomputed from the content
	prev      string
	sigOK     bool
}

// Verifier checks entries as they are read (in stream order); Report
// checks the chains.
type Verifier struct {
	keys     Keys
	opts     VerifyOptions
	chains   map[string][]link
	order    []string
	problems []Problem
	records  int
	events   int
	// The stream sequences read: the first, the last, and the gaps between.
	streamFirst, streamLast uint64
	gaps                    [][2]uint64
	streamStart, floor      uint64 // SetStream
	unprotected             string // SetUnprotected
}

// SetUnprotected says how the stream's settings let records be deleted
// (Page.Unprotected; "": they do not).
func (v *Verifier) SetUnprotected(why string) { v.unprotected = why }

// NewVerifier checks records against the trusted public keys.
func NewVerifier(keys Keys, opts VerifyOptions) *Verifier {
	return &Verifier{keys: keys, opts: opts, chains: map[string][]link{}}
}

// SetFromStart says, once reading began, whether the entries start at the
// stream's first record ever (VerifyOptions.FromStart); Report uses it.
func (v *Verifier) SetFromStart(b bool) { v.opts.FromStart = b }

// SetRetention sets VerifyOptions.Retention once the stream's max age is
// known.
func (v *Verifier) SetRetention(d time.Duration) { v.opts.Retention = d }

// SetStream says, once reading ended, which stream sequence the reading
// should have begun at (0: unknown) and the stream's first sequence after
// it (records below it left from the stream's start by age or size while
// it was read). Page.Start and Page.Floor.
func (v *Verifier) SetStream(start, floor uint64) { v.streamStart, v.floor = start, floor }

// Add checks one entry.
func (v *Verifier) Add(e Entry) {
	v.records++
	// Records leave the stream only from its start (age, size), so its
	// sequences are contiguous: a gap is a record deleted, which no link
	// shows when it was its chain's newest.
	if v.streamLast != 0 && e.StreamSeq > v.streamLast+1 {
		v.gaps = append(v.gaps, [2]uint64{v.streamLast + 1, e.StreamSeq - 1})
	}
	if v.streamFirst == 0 {
		v.streamFirst = e.StreamSeq
	}
	v.streamLast = max(v.streamLast, e.StreamSeq)
	var r Record
	if err := json.Unmarshal(e.Data, &r); err != nil || r.V != Version {
		v.problems = append(v.problems, Problem{StreamSeq: e.StreamSeq, Chain: chainOfSubject(e.Subject), Kind: Malformed, Detail: "not an audit record"})
		return
	}
	// Only the bytes its writer stored: encoding/json keeps the last of
	// duplicate keys and matches them case-insensitively, so a record
	// with a forged "events" and the signed ones under "EVENTS" would
	// verify here while other readers (jq, a SIEM) see the forgery.
	if enc, err := json.Marshal(&r); err != nil || !bytes.Equal(enc, e.Data) {
		v.problems = append(v.problems, Problem{StreamSeq: e.StreamSeq, Chain: r.Chain, Seq: r.Seq, Kind: Altered,
			Detail: "not stored as its writer encodes it (extra, duplicate or re-encoded fields)"})
		return
	}
	if !strings.HasSuffix(e.Subject, ".audit."+r.Chain) {
		v.problems = append(v.problems, Problem{StreamSeq: e.StreamSeq, Chain: r.Chain, Seq: r.Seq, Kind: Altered,
			Detail: fmt.Sprintf("stored under %s, not its chain's subject", e.Subject)})
		return
	}
	v.events += len(r.Events)
	if _, ok := v.chains[r.Chain]; !ok {
		v.order = append(v.order, r.Chain)
		role, key, _ := SplitChain(r.Chain)
		if id, ok := v.keys[key]; !ok || id.Role != role {
			v.problems = append(v.problems, Problem{StreamSeq: e.StreamSeq, Chain: r.Chain, Seq: r.Seq, Kind: UnknownKey,
				Detail: "the chain's key is not a known " + role + " identity"})
		}
	}
	v.chains[r.Chain] = append(v.chains[r.Chain], link{streamSeq: e.StreamSeq, seq: r.Seq, hash: fmt.Sprintf("%x", r.Digest()), prev: r.Prev, sigOK: r.checkSig()})
}

// Report checks every chain's order and links.
func (v *Verifier) Report() Report {
	rep := Report{Records: v.records, Events: v.events, Problems: slices.Clone(v.problems)}
	for _, name := range v.order {
		links := v.chains[name]
		sum := ChainSummary{Chain: name, First: links[0].seq, Records: len(links)}
		if _, key, ok := SplitChain(name); ok {
			sum.Identity = v.keys[key].Name
		}
		rep.Problems = append(rep.Problems, checkChain(name, links, v.opts)...)
		for _, l := range links {
			sum.Last = max(sum.Last, l.seq)
			sum.LastStreamSeq = max(sum.LastStreamSeq, l.streamSeq)
		}
		rep.Chains = append(rep.Chains, sum)
	}
	rep.Problems = append(rep.Problems, checkAnchors(v.chains, v.opts)...)
	rep.Problems = append(rep.Problems, v.streamGaps()...)
	if v.unprotected != "" {
		rep.Problems = append(rep.Problems, Problem{Chain: StreamChain, Kind: Unprotected,
			Detail: "the stream is not append-only (" + v.unprotected + "): records may have been deleted without a trace"})
	}
	slices.SortStableFunc(rep.Problems, func(a, b Problem) int {
		switch {
		case a.StreamSeq < b.StreamSeq:
			return -1
		case a.StreamSeq > b.StreamSeq:
			return 1
		}
		return 0
	})
	return rep
}

// checkChain walks one chain in stream order.
func checkChain(chain string, links []link, opts VerifyOptions) []Problem {
	var out []Problem
	bad := func(l link, kind, detail string, a ...any) {
		out = append(out, Problem{StreamSeq: l.streamSeq, Chain: chain, Seq: l.seq, Kind: kind, Detail: fmt.Sprintf(detail, a...)})
	}
	at := make(map[uint64]int, len(links)) // record seq -> its first position
	for i, l := range links {
		if _, ok := at[l.seq]; !ok {
			at[l.seq] = i
		}
	}
	// next is the record that follows seq in the chain, if stored.
	next := func(seq uint64) (link, bool) {
		if i, ok := at[seq+1]; ok {
			return links[i], true
		}
		return link{}, false
	}
	expect := links[0].seq
	if opts.FromStart {
		expect = 1
	}
	prev, havePrev := "", opts.FromStart // the hash the next record must name
	for i, l := range links {
		switch {
		case l.seq < expect || at[l.seq] != i:
			bad(l, Reordered, "record %d stored after record %d of its chain", l.seq, expect-1)
			continue
		case l.seq > expect:
			if _, later := at[expect]; later {
				bad(l, Reordered, "record %d stored before record %d of its chain", l.seq, expect)
			} else {
				bad(l, Missing, "records %d to %d of the chain are not stored before this one", expect, l.seq-1)
			}
			havePrev = false
		}
		switch {
		case !l.sigOK:
			if n, ok := next(l.seq); ok && n.prev == l.hash {
				bad(l, BadSignature, "its content is what record %d links to, its signature is not by the chain's key", l.seq+1)
			} else {
				bad(l, Altered, "its content does not match its signature")
			}
		case havePrev && l.prev != prev:
			bad(l, Altered, "its prev hash does not match record %d (re-signed by the chain's key)", l.seq-1)
		}
		// A record whose signature failed is no anchor for the next link.
		prev, havePrev, expect = l.hash, l.sigOK, l.seq+1
	}
	return out
}

func chainOfSubject(subject string) string {
	if _, c, ok := strings.Cut(subject, ".audit."); ok {
		return c
	}
	return subject
}

// StreamChain names a problem of the stream rather than of one chain.
const StreamChain = "(stream)"

// streamGaps are the stream sequences missing from what was read, but
// those below the floor (gone from the stream's start while it was read).
func (v *Verifier) streamGaps() []Problem {
	gaps := v.gaps
	if v.streamStart > 0 && v.streamFirst > v.streamStart {
		gaps = append([][2]uint64{{v.streamStart, v.streamFirst - 1}}, gaps...)
	}
	var out []Problem
	for _, g := range gaps {
		from := max(g[0], v.floor)
		if from > g[1] {
			continue
		}
		out = append(out, Problem{StreamSeq: g[1] + 1, Chain: StreamChain, Kind: Missing,
			Detail: fmt.Sprintf("stream sequences %d to %d are not stored: records leave only from the stream's start, so these were deleted", from, g[1])})
	}
	return out
}
