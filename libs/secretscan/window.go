package secretscan

import (
	"regexp"
	"slices"
	"unicode/utf8"

	"github.com/zricethezav/gitleaks/v8/report"
)

// Windows: a rule whose every match holds one of its keywords and is at
// most span bytes long (span.go) matches only within span bytes of a
// keyword's occurrence, so its regexp runs on those windows, merged where
// they meet, instead of the whole payload (gitleaks runs it on all of it
// once a keyword is anywhere). Each window reaches windowMargin bytes past
// where such a match could be: no match can touch its edges, so the
// regexp's assertions (\b, ^, $) and the rune it starts in read there as in
// the whole payload, and the matches found, window by window, are those
// of the whole payload (leftmost-first, none straddles two windows).

// windowMargin is a UTF-8 rune's longest encoding.
const windowMargin = utf8.UTFMax

// window is a byte range of a payload.
type window struct{ start, end int }

// windows are rule i's windows in payload, given every keyword occurrence
// in it (hits), merged and in order. For a
// rule whose matches start with a keyword (anchors), a merged window none
// of whose occurrences may start a match is left out: it holds no match of
// the whole payload (windows are merged over every occurrence all the
// same, so those kept are exact as above).
// sc, when not nil, lends the buffers: the windows returned stay valid
// until sc goes back to the pool.
func (s *Scanner) windows(i int, payload []byte, hits []hit, sc *scratch) []window {
	if sc == nil {
		sc = new(scratch)
	}
	n, l := len(payload), s.span[i]
	var a *regexp.Regexp
	if compiled := s.anchors[i]; compiled != nil {
		a = compiled()
	}
	all := sc.marks[:0]
	for _, h := range hits {
		if !h.k.rules.has(i) {
			continue
		}
		may := true
		if a != nil {
			// The bytes first (a few loads), the regexp only where they fit.
			if may = startsAny(s.heads[i], payload[h.pos:]); may {
				_, w := utf8.DecodeLastRune(payload[:h.pos])
				may = a.Match(payload[h.pos-w : min(n, h.pos+l+windowMargin)])
			}
		}
		all = append(all, marked{window{max(0, h.pos+len(h.k.word)-l-windowMargin), min(n, h.pos+l+windowMargin)}, may})
	}
	slices.SortFunc(all, func(a, b marked) int { return a.start - b.start })
	out := all[:0]
	for _, w := range all {
		if k := len(out) - 1; k >= 0 && w.start <= out[k].end {
			out[k].end = max(out[k].end, w.end)
			out[k].may = out[k].may || w.may
			continue
		}
		out = append(out, w)
	}
	sc.marks = all[:0]
	from := len(sc.ws)
	for _, w := range out {
		if w.may {
			sc.ws = append(sc.ws, w.window)
		}
	}
	// Capped: a later rule's windows, appended after these, cannot
	// overwrite them (a grown buffer leaves these in the old array).
	return sc.ws[from:len(sc.ws):len(sc.ws)]
}

// marked is a window around one keyword occurrence, and whether a match
// may start at that occurrence.
type marked struct {
	window
	may bool
}

// scratch is a scan's working memory, pooled in its Scanner: the keyword
// occurrences and the windows of a 64 KiB text took ~200 KB a scan.
type scratch struct {
	hits     []hit
	marks    []marked
	ws       []window
	unknowns unknowns // the known-value check's (known.go), cleared before use
	// text is the copy of a payload the rules read (blankEscapes), cleared
	// before the scratch is pooled: no payload byte stays in the pool.
	text []byte
}

// maxPooledHits bounds the scratch a pool keeps: one huge payload's
// buffers are left to the collector.
const maxPooledHits = 1 << 14

// maxPooledText bounds the copy of a payload a pooled scratch keeps.
const maxPooledText = 1 << 20

func (s *Scanner) getScratch() *scratch {
	if sc, ok := s.scratch.Get().(*scratch); ok {
		return sc
	}
	return new(scratch)
}

func (s *Scanner) putScratch(sc *scratch) {
	if cap(sc.hits) > maxPooledHits || cap(sc.marks) > maxPooledHits || cap(sc.ws) > maxPooledHits {
		return
	}
	clear(sc.text)
	if cap(sc.text) > maxPooledText {
		sc.text = nil
	}
	sc.text = sc.text[:0]
	sc.hits, sc.marks, sc.ws = sc.hits[:0], sc.marks[:0], sc.ws[:0]
	if sc.unknowns.used {
		// Its slots hold the first and last bytes of the scan's candidates:
		// none stays in the pool.
		sc.unknowns = unknowns{}
	}
	s.scratch.Put(sc)
}

// gitleaks runs the gitleaks rules whose keywords are in payload (gitleaks
// matches them lowercased), none when there are none: each windowed rule on
// its windows while they cover less than half the payload, the others on
// all of it.
func (s *Scanner) gitleaks(payload []byte) []report.Finding {
	sc := s.getScratch()
	defer s.putScratch(sc)
	set := s.keywords.rules(payload, &sc.hits)
	return s.detect(payload, set, sc.hits, sc)
}

// detect is gitleaks given the rules whose keywords are in payload and
// every keyword occurrence (hits), as the keyword walk found them.
// sc (nil for none) lends the windows' buffers.
func (s *Scanner) detect(payload []byte, set ruleSet, hits []hit, sc *scratch) []report.Finding {
	if set.has(foldBit) {
		// Text gitleaks lowercases into a keyword the ASCII walk does not
		// see, or a (?i) rule matches beyond its keyword's ASCII letters:
		// gitleaks' own walk decides, over all of it.
		return s.detector(s.all).DetectBytes(payload)
	}
	for i := range s.rules {
		// A rule run on the whole payload is skipped where its class run
		// is nowhere (the look costs less than the regexp); a windowed
		// rule is looked at below.
		if set.has(i) && (!s.holdsNeeds(i, payload) || !s.windowed.has(i) && !s.runs[i].holds(payload)) {
			set.remove(i)
		}
	}
	if set.empty() {
		return nil
	}
	whole, windowed := set, set
	windowed.and(&s.windowed)
	whole.andNot(&s.windowed)
	type run struct {
		rule int
		ws   []window
	}
	var runs []run
	for i := range s.rules {
		if !windowed.has(i) {
			continue
		}
		// Its class run: looked for in the whole payload first where the
		// rule's keywords are many (the look reads about one byte in n,
		// each occurrence makes a window), else in each window (a match
		// lies within one).
		cls := &s.runs[i]
		if cls.n > 0 && hitsOf(i, hits, len(payload)/(16*cls.n)) && !cls.holds(payload) {
			continue
		}
		// Only where a match may be (for a rule whose matches start with a
		// keyword) or anywhere near a keyword.
		ws := s.windows(i, payload, hits, sc)
		if cls.n > 0 {
			ws = slices.DeleteFunc(ws, func(w window) bool { return !cls.holds(payload[w.start:w.end]) })
		}
		covered := 0
		for _, w := range ws {
			covered += w.end - w.start
		}
		switch {
		case len(ws) == 0: // no match can start anywhere
		case 2*covered >= len(payload):
			whole.add(i)
		default:
			runs = append(runs, run{i, ws})
		}
	}
	var out []report.Finding
	if !whole.empty() {
		out = s.detector(whole).DetectBytes(payload)
	}
	for _, r := range runs {
		var one ruleSet
		one.add(r.rule)
		d := s.detector(one)
		for _, w := range r.ws {
			out = append(out, d.DetectBytes(payload[w.start:w.end])...)
		}
	}
	return out
}

// hitsOf reports whether n or more of hits are of rule i's keywords.
func hitsOf(i int, hits []hit, n int) bool {
	for _, h := range hits {
		if n <= 0 {
			break
		}
		if h.k.rules.has(i) {
			n--
		}
	}
	return n <= 0
}

// holdsNeeds reports whether payload holds a text of each of rule i's needs.
func (s *Scanner) holdsNeeds(i int, payload []byte) bool {
	for _, texts := range s.needs[i] {
		if !slices.ContainsFunc(texts, func(t string) bool { return containsFold(payload, t) }) {
			return false
		}
	}
	return true
}

// foldRunes are the runes outside ASCII that lowercase (strings.ToLower,
// as gitleaks matches keywords) or fold (as (?i) matches) to text holding
// ASCII (TestFoldRunes checks the list): a payload holding one is left to
// gitleaks' own keyword walk. The keyword walk flags them as keywords of
// the rule foldBit.
var foldRunes = []string{"\u0130", "\u017f", "\u212a"} // İ, ſ, K (Kelvin)

// foldBit is the rule index the keyword walk gives foldRunes.
const foldBit = maxRules - 1
