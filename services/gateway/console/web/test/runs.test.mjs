// What an install screen shows before Save (src/runs.ts): what the draft a
// registry entry made will run, whole and revealed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { load } from './load.mjs';

const { whatRuns, commandLine, runKey } = await load('runs.ts');

test('an npm draft shows its whole command line and every variable', () => {
  const cfg = {
    name: 'x', enabled: false, transport: { type: 'stdio' },
    package: { type: 'npm', identifier: 'x-mcp@1.0.0', runtime_args: ['--prefer-online'], args: ['--root', '/srv/a b', 'mode\u202Eexe.txt', ''] },
    env_vars: { LOG_LEVEL: { value: 'debug' }, API_KEY: { is_secret: true, secret_ref: 'API_KEY', required: true }, TOKEN_FILE: { keyfile_path: '/k' } },
  };
  const items = whatRuns(cfg);
  assert.deepEqual(items[0], { label: 'Command', text: 'npx -y --prefer-online x-mcp@1.0.0 --root "/srv/a b" "mode[U+202E]exe.txt" ""' });
  const env = items.filter((i) => i.label === 'Environment').map((i) => i.text);
  assert.deepEqual(env, ['API_KEY=(secret)', 'LOG_LEVEL=debug', 'TOKEN_FILE=(secret)']);
});

test('a docker draft shows the -e the runner adds and the entry runtime arguments', () => {
  const cfg = {
    name: 'x', enabled: false, transport: { type: 'stdio' },
    package: { type: 'docker', identifier: 'ghcr.io/acme/x:1', runtime_args: ['-v', 'data:/data', '-e', 'A\u200B=1'], args: ['serve'] },
    env_vars: { B: { value: 'x y' }, A: { is_secret: true } },
  };
  assert.equal(commandLine(cfg), 'docker run --rm -i -e A -e B -v data:/data -e "A[U+200B]=1" ghcr.io/acme/x:1 serve');
  assert.ok(whatRuns(cfg).some((i) => i.text === 'B="x y"'));
});

test('a remote draft shows its URL and header names, secrets marked', () => {
  const cfg = { name: 'x', enabled: false, package: { type: 'http', identifier: 'https://10.0.0.1/mcp' }, transport: { type: 'http', url: 'https://10.0.0.1/mcp', headers: { 'X-Region': 'eu' } }, config: { a: 1 } };
  const items = whatRuns(cfg, [{ kind: 'header', name: 'Authorization' }, { kind: 'env', name: 'IGNORED' }]);
  assert.deepEqual(items, [
    { label: 'URL', text: 'https://10.0.0.1/mcp' },
    { label: 'Header', text: 'Authorization: (secret)' },
    { label: 'Header', text: 'X-Region: eu' },
    { label: 'Config', text: '{"a":1}' },
  ]);
});

test('a changed draft reads as changed', () => {
  const a = { name: 'x', enabled: false, transport: { type: 'stdio' }, package: { type: 'npm', identifier: 'x@1.0.0', args: ['/a'] } };
  const b = structuredClone(a);
  b.package.args = ['/b'];
  assert.notEqual(runKey(whatRuns(a)), runKey(whatRuns(b)));
  assert.equal(runKey(whatRuns(a)), runKey(whatRuns(structuredClone(a))));
});
