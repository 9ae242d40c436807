// load bundles src/<name> (and what it imports) with esbuild in memory and
// imports the result, for the unit tests under test/.
import { build } from 'esbuild';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const src = join(dirname(fileURLToPath(import.meta.url)), '..', 'src');

export async function load(name) {
  const out = await build({ entryPoints: [join(src, name)], bundle: true, format: 'esm', platform: 'neutral', target: 'es2022', write: false, logLevel: 'warning' });
  return import('data:text/javascript;base64,' + Buffer.from(out.outputFiles[0].text).toString('base64'));
}
