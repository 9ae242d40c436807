// Text from MCP servers, registries and other users reaches the page only as
// text (never HTML), but a text can still hide from its reader what a model
// or a package manager reads: format characters (zero-width spaces and
// joiners, bidirectional overrides that reorder what follows, Unicode tags
// that carry invisible ASCII, the "ASCII smuggling" of hidden instructions in
// a tool description), controls, private-use and unassigned code points, and
// runs of variation selectors (which can carry bytes the same way). Two tool
// definitions that differ only there look the same in a pin review. reveal
// spells each such character as [U+XXXX], so what is reviewed is what is
// there.

const HIDDEN = /[\p{Cc}\p{Cf}\p{Co}\p{Cn}\u2028\u2029\uFE00-\uFE0F\u{E0100}-\u{E01EF}]/gu;
const VS = /^[\uFE00-\uFE0F\u{E0100}-\u{E01EF}]$/u;

// vsAt reports whether the code point at (or, for a trailing surrogate,
// ending at) i of s is a variation selector.
function vsAt(s: string, i: number): boolean {
  if (i < 0 || i >= s.length) return false;
  const lo = s.charCodeAt(i);
  const start = lo >= 0xdc00 && lo <= 0xdfff && i > 0 ? i - 1 : i;
  return VS.test(String.fromCodePoint(s.codePointAt(start)!));
}

/** reveal spells the characters of s that would not show (see above) as [U+XXXX]. */
export function reveal(s: string): string {
  return s.replace(HIDDEN, (c: string, i: number) => {
    // Newline, tab and carriage return show as what they are.
    if (c === '\n' || c === '\t' || c === '\r') return c;
    // One FE0E/FE0F after an ordinary character is an emoji's presentation
    // selector; in a run of selectors, or first, it is hiding something.
    if ((c === '\uFE0E' || c === '\uFE0F') && i > 0 && !vsAt(s, i - 1) && !vsAt(s, i + 1)) return c;
    return '[U+' + c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0') + ']';
  });
}

/** revealJSON is v as indented JSON (a string as it is), revealed. */
export function revealJSON(v: unknown): string {
  if (v === undefined) return '(none)';
  return reveal(typeof v === 'string' ? v : JSON.stringify(v, null, 2) ?? String(v));
}
