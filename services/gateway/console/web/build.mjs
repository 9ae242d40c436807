// Builds the console into ../dist: type check (tsc --noEmit), unit tests
// (node --test test/*.test.mjs), bundle and minify src/main.ts and
// src/app.css with esbuild, copy src/index.html.
// No source maps: dist is embedded in the gateway and served as is.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));
const dist = join(here, '..', 'dist');
const require = createRequire(import.meta.url);

try {
  execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '--noEmit', '-p', here], { stdio: 'inherit' });
} catch {
  console.error('type check failed');
  process.exit(1);
}

// The unit tests (test/*.test.mjs: what the console shows of untrusted
// text, no DOM needed) run with every build.
const tests = readdirSync(join(here, 'test')).filter((f) => f.endsWith('.test.mjs')).map((f) => join(here, 'test', f));
try {
  execFileSync(process.execPath, ['--test', '--test-reporter=spec', ...tests], { stdio: 'inherit' });
} catch {
  console.error('unit tests failed');
  process.exit(1);
}

mkdirSync(dist, { recursive: true });
// Old outputs go; dotfiles (.gitkeep, make's .built stamp) stay.
for (const f of readdirSync(dist)) {
  if (!f.startsWith('.')) rmSync(join(dist, f), { recursive: true, force: true });
}
const common = { bundle: true, minify: true, sourcemap: false, legalComments: 'none', logLevel: 'warning' };
await build({ ...common, entryPoints: [join(here, 'src', 'main.ts')], outfile: join(dist, 'app.js'), format: 'iife', target: 'es2022' });
await build({ ...common, entryPoints: [join(here, 'src', 'app.css')], outfile: join(dist, 'app.css') });
copyFileSync(join(here, 'src', 'index.html'), join(dist, 'index.html'));

// The page is served with a strict CSP and must not reach any other origin:
// fail the build when an absolute URL (other than the jaeger link built at
// run time) or an inline script/style slips into the output.
for (const f of ['index.html', 'app.js', 'app.css']) {
  const text = readFileSync(join(dist, f), 'utf8');
  const url = text.match(/(?:https?:|["'(=\s])\/\/[a-z0-9-]+\.[a-z]{2,}/i);
  if (url) throw new Error(`${f}: external URL ${url[0]} in the build output`);
}
const html = readFileSync(join(dist, 'index.html'), 'utf8');
if (/<script(?![^>]*\bsrc=)|<style|\sstyle=/i.test(html)) throw new Error('index.html: inline script or style');
console.log('console built into', dist);
