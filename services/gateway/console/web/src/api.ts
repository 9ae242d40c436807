// The REST client: every call carries the key from sessionStorage (never a
// URL), errors are the API's contract {code,message,field}, and a 401 with
// the gateway's challenge logs the console out.

const KEY = 'mcpbus.console.key';

export function getKey(): string | null {
  return sessionStorage.getItem(KEY);
}
export function setKey(k: string | null): void {
  if (k) sessionStorage.setItem(KEY, k);
  else sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(public status: number, public code: string, message: string, public field?: string) {
    super(message);
  }
}

// Set by main: what to do when the key stops working.
let onUnauthorized: (msg: string) => void = () => {};
export function setUnauthorizedHandler(f: (msg: string) => void): void {
  onUnauthorized = f;
}

async function toError(res: Response): Promise<ApiError> {
  let body: { code?: string; message?: string; field?: string } = {};
  try {
    body = await res.json();
  } catch {
    /* not JSON */
  }
  return new ApiError(res.status, body.code || 'HTTP_' + res.status, body.message || `${res.status} ${res.statusText}`, body.field || undefined);
}

// credentials: 'omit' on every call (the key is the credential), except
// withCookies: an authorization's continue, whose answer sets the cookie the
// OAuth callback requires in this browser.
export async function api<T>(method: string, path: string, body?: unknown, opts: { signal?: AbortSignal; noLogout?: boolean; withCookies?: boolean } = {}): Promise<T> {
  const key = getKey();
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (key) headers.Authorization = 'Bearer ' + key;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: opts.signal, credentials: opts.withCookies ? 'same-origin' : 'omit', cache: 'no-store' });
  } catch (e) {
    if ((e as Error).name === 'AbortError') throw e;
    throw new ApiError(0, 'NETWORK_ERROR', 'Network unavailable. Check connection.');
  }
  if (!res.ok) {
    const err = await toError(res);
    // Only the gateway's own refusal of the key carries a challenge; a 401
    // without one relays a remote server refusing mcpbus (it needs
    // authorizing), which must not sign the user out.
    if (res.status === 401 && !opts.noLogout && res.headers.has('WWW-Authenticate')) onUnauthorized('Your key is no longer valid. Sign in again.');
    throw err;
  }
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  return (text ? JSON.parse(text) : undefined) as T;
}

export const enc = encodeURIComponent;

export interface SSEEvent {
  id: string;
  event: string;
  data: string;
}

/**
 * follow reads a Server-Sent Events stream with fetch (EventSource cannot
 * send an Authorization header), parses it, and reconnects with
 * Last-Event-ID after a drop, a missed heartbeat or an error, until the
 * signal aborts. onOpen runs each time the stream is (re)connected.
 */
export function follow(path: string, onEvent: (e: SSEEvent) => void, signal: AbortSignal, onOpen?: () => void, onState?: (connected: boolean) => void, startId = ''): void {
  let lastId = startId;
  let retry = 2000;
  const run = async () => {
    while (!signal.aborted) {
      const ctl = new AbortController();
      const abort = () => ctl.abort();
      signal.addEventListener('abort', abort);
      // Heartbeats come every 15 s: 45 s of silence means a dead connection.
      let watchdog = 0;
      const arm = () => {
        clearTimeout(watchdog);
        watchdog = window.setTimeout(() => ctl.abort(), 45000);
      };
      try {
        const headers: Record<string, string> = { Accept: 'text/event-stream', Authorization: 'Bearer ' + (getKey() ?? '') };
        if (lastId) headers['Last-Event-ID'] = lastId;
        arm();
        const res = await fetch(path, { headers, signal: ctl.signal, credentials: 'omit', cache: 'no-store' });
        if (res.status === 401) {
          onUnauthorized('Your key is no longer valid. Sign in again.');
          return;
        }
        if (res.status === 403) {
          // The key lacks the scope: retrying cannot help.
          onState?.(false);
          return;
        }
        if (!res.ok || !res.body) throw await toError(res);
        onState?.(true);
        onOpen?.();
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        let ev: SSEEvent = { id: '', event: 'message', data: '' };
        let hasData = false;
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          arm();
          buf += value;
          let nl: number;
          while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
            const line = buf.slice(0, nl);
            buf = buf.slice(nl + (buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1));
            if (line === '') {
              // An id without data (the stream's first frame) still moves
              // the resume point, as EventSource does.
              if (ev.id) lastId = ev.id;
              if (hasData) {
                try {
                  onEvent(ev);
                } catch (e) {
                  console.warn('event handler', e);
                }
              }
              ev = { id: '', event: 'message', data: '' };
              hasData = false;
              continue;
            }
            if (line.startsWith(':')) continue; // comment: heartbeat
            const c = line.indexOf(':');
            const name = c < 0 ? line : line.slice(0, c);
            let val = c < 0 ? '' : line.slice(c + 1);
            if (val.startsWith(' ')) val = val.slice(1);
            if (name === 'data') {
              ev.data = hasData ? ev.data + '\n' + val : val;
              hasData = true;
            } else if (name === 'event') ev.event = val;
            else if (name === 'id') ev.id = val;
            else if (name === 'retry' && /^\d+$/.test(val)) retry = Math.min(Number(val), 30000);
          }
        }
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof ApiError && e.status === 400 && lastId) lastId = ''; // a resume point the server no longer takes
      } finally {
        clearTimeout(watchdog);
        signal.removeEventListener('abort', abort);
      }
      if (signal.aborted) return;
      onState?.(false);
      await new Promise((r) => setTimeout(r, retry));
    }
  };
  void run();
}

// The API's shapes the console reads (libs/model).
export interface Me {
  key_id: string;
  name: string;
  scopes: string[];
  jaeger_url?: string;
}
export interface McpConfig {
  id?: string;
  name: string;
  slug?: string;
  enabled: boolean;
  source?: { type: string; name?: string; version?: string; qualified_name?: string; url?: string };
  package?: { type: string; identifier: string; runtime_hint?: string; runtime_args?: string[]; args?: string[] };
  transport: { type: string; url?: string; headers?: Record<string, string>; secret_headers?: string[]; oauth?: { client_id?: string; scopes?: string[] } };
  auth_type?: string;
  env_vars?: Record<string, { value?: string; secret_ref?: string; keyfile_path?: string; is_secret?: boolean; required?: boolean }>;
  config?: unknown;
  tools?: { allow?: string[]; deny?: string[] };
  runtime?: { call_timeout?: string; start_timeout?: string; eager?: boolean; idle_timeout?: string; max_inflight?: number; replicas?: number };
  created_at?: string;
  updated_at?: string;
  revision?: number;
  version?: number;
}
export interface Status {
  server: string;
  state: string;
  tools?: string[];
  code?: string;
  message?: string;
  field?: string;
  updated_at?: string;
  calls?: number;
  errors?: number;
  restarts?: number;
  retry_at?: string;
}
export interface OAuthStartReply {
  server: string;
  principal?: string;
  authorization_url: string;
  flow?: string;
  expires_at: string;
}
// The provider's page of a per-principal flow, once this browser continued it.
export interface OAuthContinueReply {
  server: string;
  authorization_url: string;
  expires_at: string;
}
export interface OAuthEvent {
  type: 'authorized' | 'failed';
  server: string;
  /** set when a principal's own flow ended, not the server's */
  principal?: string;
  code?: string;
  message?: string;
  at: string;
}
export interface CallEvent {
  server: string;
  tool: string;
  request_id?: string;
  trace_id?: string;
  outcome: string;
  code?: string;
  error?: string;
  duration_ms: number;
  at: string;
}
export interface BusEvent {
  kind: string;
  name: string;
  subject: string;
  time?: string;
  data: unknown;
}
