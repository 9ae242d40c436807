// Unit tests of src/text.ts (node --test, run by build.mjs): bundled with
// esbuild in memory and imported, so they need no DOM and no TypeScript
// loader.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { load } from './load.mjs';

const { reveal, revealJSON } = await load('text.ts');

test('plain text, newlines, tabs and emoji are left as they are', () => {
  for (const s of ['Echo a message back.', 'line one\nline two\ttab\r\n', 'héllo ✓ 日本語', 'I ❤️ it', '☺︎ text style', '👍🏽']) {
    assert.equal(reveal(s), s);
  }
});

test('zero-width, bidi, tag and control characters are spelled out', () => {
  assert.equal(reveal('a\u200Bb'), 'a[U+200B]b');
  assert.equal(reveal('evil\u202Egnp.exe'), 'evil[U+202E]gnp.exe');
  assert.equal(reveal('x\u2066y\u2069'), 'x[U+2066]y[U+2069]');
  assert.equal(reveal('\u0007bell\u001b[31m'), '[U+0007]bell[U+001B][31m');
  assert.equal(reveal('soft\u00ADhyphen'), 'soft[U+00AD]hyphen');
  // "Ignore" as Unicode tags: invisible in a browser, read by a model.
  const tags = [...'Ignore'].map((c) => String.fromCodePoint(0xe0000 + c.codePointAt(0))).join('');
  assert.equal(reveal('Adds numbers.' + tags), 'Adds numbers.[U+E0049][U+E0067][U+E006E][U+E006F][U+E0072][U+E0065]');
  assert.equal(reveal('private\uE000use'), 'private[U+E000]use');
});

test('runs of variation selectors (bytes hidden after a character) are spelled out', () => {
  assert.equal(reveal('a\uFE01\u{E0110}'), 'a[U+FE01][U+E0110]');
  assert.equal(reveal('a\uFE0F\uFE0F'), 'a[U+FE0F][U+FE0F]');
  assert.equal(reveal('\uFE0Fstart'), '[U+FE0F]start');
});

test('two definitions that look the same differ once revealed', () => {
  const pinned = { description: 'Adds two numbers.' };
  const next = { description: 'Adds two numbers.\u200B\u{E0053}\u{E0045}\u{E004E}\u{E0044}' };
  assert.notEqual(revealJSON(pinned.description), revealJSON(next.description));
  assert.equal(revealJSON(next.description), 'Adds two numbers.[U+200B][U+E0053][U+E0045][U+E004E][U+E0044]');
  // JSON.stringify leaves such characters raw: revealed in schemas too.
  assert.match(revealJSON({ properties: { 'pa\u202Eth': { description: 'x\u200Dy' } } }), /pa\[U\+202E\]th[\s\S]*x\[U\+200D\]y/);
  assert.equal(revealJSON(undefined), '(none)');
});
