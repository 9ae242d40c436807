// Shared state of a signed-in session: who the key is, the servers, their
// status and the recent calls, kept current by one event stream.
import { toast } from './dom';
import { api, follow, type BusEvent, type CallEvent, type McpConfig, type Me, type Status } from './api';
import { statusToast } from './statustoast';

export const MAX_CALLS = 500;

export const store = {
  me: null as Me | null,
  servers: [] as McpConfig[],
  status: new Map<string, Status>(),
  calls: [] as CallEvent[],
  live: false,
  loaded: false,
  // The server of the last tool_changed event (its Row reloads its pins).
  toolChanged: '',
};

type Listener = (what: 'servers' | 'status' | 'calls' | 'live' | 'pins') => void;
const listeners = new Set<Listener>();
export function subscribe(l: Listener): () => void {
  listeners.add(l);
  return () => listeners.delete(l);
}
function emit(what: Parameters<Listener>[0]): void {
  for (const l of [...listeners]) l(what);
}

export function isAdmin(): boolean {
  return !!store.me?.scopes.includes('admin');
}
// canCall: the key may make tool calls, and so durable tasks (admin or call).
export function canCall(): boolean {
  return !!store.me && (store.me.scopes.includes('admin') || store.me.scopes.includes('call'));
}
export function canChat(): boolean {
  return !!store.me && (store.me.scopes.includes('admin') || store.me.scopes.includes('chat'));
}

export async function refreshServers(): Promise<void> {
  const r = await api<{ servers: McpConfig[] }>('GET', '/api/v1/servers');
  store.servers = r.servers ?? [];
  store.loaded = true;
  emit('servers');
}

export async function refreshStatus(): Promise<void> {
  const r = await api<{ servers: Status[] }>('GET', '/api/v1/status');
  store.status = new Map((r.servers ?? []).map((s) => [s.server, s]));
  emit('status');
}

export function setServer(cfg: McpConfig): void {
  const i = store.servers.findIndex((s) => s.id === cfg.id);
  if (i >= 0) store.servers[i] = cfg;
  else store.servers.push(cfg);
  emit('servers');
}

export function removeServer(id: string): void {
  store.servers = store.servers.filter((s) => s.id !== id && s.slug !== id);
  emit('servers');
}

export function setStatus(st: Status): void {
  store.status.set(st.server, st);
  emit('status');
}

let stop: AbortController | null = null;
let refreshTimer = 0;

// The calls seen and the last event id survive a reload of the tab
// (sessionStorage, like the key): the stream resumes where it was, so the
// Activity page keeps its history. Only a recent resume point is used.
const SAVED = 'mcpbus.console.events';
const RESUME_MAX_AGE = 10 * 60 * 1000;
let saveTimer = 0;
let lastEventId = '';
function save(): void {
  clearTimeout(saveTimer);
  saveTimer = window.setTimeout(() => {
    try {
      sessionStorage.setItem(SAVED, JSON.stringify({ id: lastEventId, at: Date.now(), calls: store.calls.slice(0, 200) }));
    } catch {
      /* storage full: history is a convenience */
    }
  }, 300);
}
function restore(): string {
  try {
    const v = JSON.parse(sessionStorage.getItem(SAVED) ?? 'null') as { id: string; at: number; calls: CallEvent[] } | null;
    if (!v) return '';
    store.calls = Array.isArray(v.calls) ? v.calls : [];
    return Date.now() - v.at < RESUME_MAX_AGE && /^\d+$/.test(v.id) ? v.id : '';
  } catch {
    return '';
  }
}

/** start follows status, call, config and tool_changed events (admin keys only). */
export function start(): void {
  stop?.abort();
  stop = null;
  if (!isAdmin()) return;
  stop = new AbortController();
  const resumeFrom = restore();
  void refreshServers().catch(() => {});
  follow('/api/v1/events?kinds=status,call,config,tool_changed', (e) => {
    if (e.id) {
      lastEventId = e.id;
      save();
    }
    let ev: BusEvent;
    try {
      ev = JSON.parse(e.data);
    } catch {
      return;
    }
    if (ev.kind === 'status') {
      const st = ev.data as Status;
      const prev = store.status.get(st.server);
      // seeds/002 §11.1: a crash, restarts given up (statustoast.ts).
      const name = store.servers.find((s) => s.slug === st.server)?.name || st.server;
      const t = statusToast(prev, st, name);
      if (t) toast(t.text, t.kind);
      setStatus(st);
    } else if (ev.kind === 'call') {
      const c = ev.data as CallEvent;
      // A resumed stream may repeat calls restored from storage.
      if (c.request_id && store.calls.some((x) => x.request_id === c.request_id && x.at === c.at)) return;
      store.calls.unshift(c);
      if (store.calls.length > MAX_CALLS) store.calls.length = MAX_CALLS;
      emit('calls');
    } else if (ev.kind === 'tool_changed') {
      store.toolChanged = (ev.data as { server: string }).server;
      emit('pins');
    } else if (ev.kind === 'config') {
      // Someone changed a config: reload the list (coalesced).
      clearTimeout(refreshTimer);
      refreshTimer = window.setTimeout(() => void refreshServers().catch(() => {}), 200);
    }
  }, stop.signal,
  // (Re)connected: the status may have moved while we were away.
  () => void refreshStatus().catch(() => {}),
  (live) => { store.live = live; emit('live'); }, resumeFrom);
}

export function stopAll(): void {
  stop?.abort();
  clearTimeout(saveTimer);
  sessionStorage.removeItem(SAVED);
  stop = null;
  store.servers = [];
  store.status = new Map();
  store.calls = [];
  store.loaded = false;
  store.live = false;
  store.toolChanged = '';
}
