// What a server's status change is worth a toast for (seeds/002 §11.1):
// a crash the runner restarts, restarts that gave up, an error that ends a
// running server for good. Pure, so test/statustoast.test.mjs checks it.
import type { Status } from './api';

export interface StatusToast {
  text: string;
  kind: 'info' | 'error';
}

// The codes of the failures the runner retries (services/runner retryable:
// a crash, a start that timed out or lost its connection). Such an error
// without retry_at is one whose automatic restarts ran out.
const RETRIED = new Set(['SERVICE_UNAVAILABLE', 'NETWORK']);

/**
 * statusToast is the toast for a server going from prev (undefined: not
 * seen yet) to next, null for none; name is what the console calls it.
 * The runner writes an error together with its retry_at when an automatic
 * restart comes, and without one when none comes (model.Status RetryAt):
 * only the first says "Reconnecting...".
 */
export function statusToast(prev: Status | undefined, next: Status, name: string): StatusToast | null {
  if (next.state !== 'error' || !prev) return null;
  if (next.retry_at) {
    // A running server went down and comes back by itself. The errors of
    // the later tries (and of a server waiting for room) say nothing new.
    return prev.state === 'running' ? { text: `${name} disconnected. Reconnecting...`, kind: 'error' } : null;
  }
  if (prev.state === 'error' && !prev.retry_at) return null; // the same error, written again (call counters)
  if (RETRIED.has(next.code ?? '')) return { text: `${name} failed to restart. Check settings.`, kind: 'error' };
  // Never retried (UNAUTHORIZED after the upstream refused the credentials,
  // an exec-policy refusal): the error's own words, when it ended a running
  // server or a restart that was coming. A start someone asked for reports
  // its error to them.
  if (prev.state === 'running' || prev.retry_at) return { text: `${name}: ${next.message || next.code || 'error'}`, kind: 'error' };
  return null;
}
