// The toasts a server's status changes get (src/statustoast.ts): the
// runner's error says whether a restart comes (retry_at), and only then
// does the console say "Reconnecting...".
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { load } from './load.mjs';

const { statusToast } = await load('statustoast.ts');

const at = '2026-01-02T03:04:05Z';
const running = { server: 'gh', state: 'running' };
const starting = { server: 'gh', state: 'starting' };
const crashed = { server: 'gh', state: 'error', code: 'SERVICE_UNAVAILABLE', message: 'server process exited', retry_at: at };
const gaveUp = { server: 'gh', state: 'error', code: 'SERVICE_UNAVAILABLE', message: 'server process exited; gave up after 3 tries; run `mcpbus restart gh`' };
const refused = { server: 'gh', state: 'error', code: 'UNAUTHORIZED', message: 'Authentication failed. Check your API key.' };
const policy = { server: 'gh', state: 'error', code: 'VALIDATION_ERROR', field: 'package.type', message: 'package type docker is not allowed on runner r1 (--exec-types npm)' };

test('a crash with a restart coming says Reconnecting', () => {
  assert.deepEqual(statusToast(running, crashed, 'GitHub'), { text: 'GitHub disconnected. Reconnecting...', kind: 'error' });
});

test('restarts that gave up say failed to restart', () => {
  // The last try failed to start, or the server crashed again at once.
  assert.deepEqual(statusToast(starting, gaveUp, 'GitHub'), { text: 'GitHub failed to restart. Check settings.', kind: 'error' });
  assert.deepEqual(statusToast(running, gaveUp, 'GitHub'), { text: 'GitHub failed to restart. Check settings.', kind: 'error' });
  assert.deepEqual(statusToast(crashed, gaveUp, 'GitHub'), { text: 'GitHub failed to restart. Check settings.', kind: 'error' });
});

test('an error the runner never restarts does not say Reconnecting', () => {
  assert.deepEqual(statusToast(running, refused, 'GitHub'), { text: 'GitHub: Authentication failed. Check your API key.', kind: 'error' });
  assert.deepEqual(statusToast(running, policy, 'GitHub'), { text: 'GitHub: package type docker is not allowed on runner r1 (--exec-types npm)', kind: 'error' });
  assert.deepEqual(statusToast(crashed, policy, 'GitHub'), { text: 'GitHub: package type docker is not allowed on runner r1 (--exec-types npm)', kind: 'error' });
});

test('no toast for what says nothing new', () => {
  // The later tries of a series, and the counters' refresh of an error.
  assert.equal(statusToast(starting, crashed, 'GitHub'), null);
  assert.equal(statusToast(crashed, { ...crashed, calls: 3 }, 'GitHub'), null);
  assert.equal(statusToast(gaveUp, { ...gaveUp, calls: 3 }, 'GitHub'), null);
  // A start someone asked for answers them with its error.
  assert.equal(statusToast(starting, refused, 'GitHub'), null);
  // Not an error, or a server not seen before.
  assert.equal(statusToast(crashed, starting, 'GitHub'), null);
  assert.equal(statusToast(starting, running, 'GitHub'), null);
  assert.equal(statusToast(undefined, crashed, 'GitHub'), null);
});
