// Servers: the list with enable switches and live status badges, tools with
// their schemas, restart, edit (tool filters, timeouts), history and
// rollback, delete with the seeds' confirmation (seeds/002 §1.1, §1.8, §11.3),
// Authorize for a remote server that wants OAuth (seeds/002 §4.3), and the
// tool changes awaiting review (pins.ts).
import { api, ApiError, enc, follow, type McpConfig, type OAuthEvent, type OAuthStartReply, type Status } from './api';
import { clear, confirmDialog, field, formError, fmtTime, h, pageHeading, setFieldError, showError, toast, uid, type Field, reportFormError } from './dom';
import { PinsBox } from './pins';
import { reveal, revealJSON } from './text';
import { refreshServers, refreshStatus, removeServer, setServer, setStatus, store, subscribe } from './store';

interface Badge {
  label: string;
  cls: string;
}

export function badgeOf(cfg: McpConfig, st: Status | undefined): Badge {
  if (!cfg.enabled || st?.state === 'disabled') return { label: 'Disabled', cls: 'disabled' };
  switch (st?.state) {
    case 'running':
      return { label: 'Connected', cls: 'connected' };
    case 'error':
      return { label: 'Error', cls: 'error' };
    default:
      return { label: 'Idle', cls: 'idle' };
  }
}

function key(cfg: McpConfig): string {
  return cfg.slug || cfg.id || cfg.name;
}

interface ToolInfo {
  name: string;
  description: string;
  parameters: unknown;
}

export function serversPage(main: HTMLElement): () => void {
  const list = h('ul', { class: 'servers', 'aria-label': 'Servers' });
  const empty = h('p', { class: 'muted' }, 'Loading…');
  const refresh = h('button', { type: 'button', class: 'btn btn-small' }, 'Refresh');
  refresh.addEventListener('click', () => {
    void Promise.all([refreshServers(), refreshStatus()]).catch((e) => toast((e as Error).message, 'error'));
  });
  main.append(
    h('div', { class: 'page-head' }, pageHeading('Servers'), h('div', { class: 'actions' }, refresh, h('a', { class: 'btn btn-primary', href: '#/add' }, '+ Add server'))),
    empty, list);

  // One row per server, kept across renders so open panels and focus
  // survive updates, and kept in place while the page is open: the servers
  // first listed are in name order, a server added later goes below them,
  // and a server removed (here or elsewhere) keeps its row, marked Removed
  // and no longer usable, until the page is left. Were rows inserted in
  // name order or taken out, the rows below would move, and a click aimed
  // at one server's switch could land on another's.
  const rows = new Map<string, Row>();
  const render = () => {
    const seen = new Set<string>();
    const added: McpConfig[] = [];
    for (const cfg of store.servers) {
      const k = cfg.id || key(cfg);
      seen.add(k);
      const r = rows.get(k);
      if (r) {
        r.setGone(false);
        r.update(cfg);
      } else added.push(cfg);
    }
    for (const cfg of added.sort((a, b) => a.name.localeCompare(b.name))) {
      const r = new Row(cfg);
      rows.set(cfg.id || key(cfg), r);
      list.append(r.el);
    }
    for (const [k, r] of rows) if (!seen.has(k)) r.setGone(true);
    empty.textContent = store.loaded ? (rows.size ? '' : 'No servers yet. Add one to get started.') : 'Loading…';
    empty.hidden = store.loaded && rows.size > 0;
  };
  render();
  const unsub = subscribe((w) => {
    if (w === 'servers' || w === 'status') render();
    if (w === 'pins') rows.forEach((r) => r.toolChanged(store.toolChanged));
  });
  void Promise.all([refreshServers(), refreshStatus()]).catch((e) => {
    if (!(e instanceof ApiError && e.status === 401)) toast((e as Error).message, 'error');
  });
  const tick = window.setInterval(() => rows.forEach((r) => r.updateRetry()), 1000);
  return () => {
    unsub();
    clearInterval(tick);
  };
}

class Row {
  el: HTMLLIElement;
  cfg: McpConfig;
  private title: HTMLElement;
  private sw: HTMLButtonElement;
  private badge: HTMLElement;
  private detail: HTMLElement;
  private retry: HTMLElement;
  private meta: HTMLElement;
  private panel: HTMLElement;
  private toolsBtn: HTMLButtonElement;
  private editBtn: HTMLButtonElement;
  private histBtn: HTMLButtonElement;
  private open: 'tools' | 'edit' | 'history' | null = null;
  private busy = false;
  private authBtn: HTMLButtonElement;
  private authNote: HTMLElement;
  // Set when enabling or restarting was refused with UNAUTHORIZED (the
  // status may not say so: a refused enable leaves the server disabled).
  private refused = false;
  private flow: AbortController | null = null;
  // For an oauth server: whether the credential service holds its tokens
  // (asked once; null until known).
  private hasTokens: boolean | null = null;
  private askedTokens = false;
  private pins: PinsBox;
  // The state last seen: a (re)start lists the tools again, which may change them.
  private lastState: string | null = null;
  // While the server is gone (removed): the controls setGone disabled.
  private goneControls: HTMLElement[] | null = null;

  constructor(cfg: McpConfig) {
    this.cfg = cfg;
    const titleId = uid('srv');
    this.title = h('h2', { id: titleId, class: 'srv-name' }, cfg.name);
    this.sw = h('button', { type: 'button', role: 'switch', class: 'switch', 'aria-checked': 'false' }, h('span', { class: 'knob', 'aria-hidden': 'true' }));
    this.sw.addEventListener('click', () => void this.toggle());
    this.badge = h('span', { class: 'badge' });
    this.detail = h('p', { class: 'srv-detail' });
    this.retry = h('span', { class: 'retry' });
    this.meta = h('p', { class: 'srv-meta muted' });
    this.panel = h('div', { class: 'srv-panel', hidden: true, role: 'region', 'aria-labelledby': titleId });
    this.toolsBtn = h('button', { type: 'button', class: 'btn btn-small', 'aria-expanded': 'false' }, 'Tools');
    this.editBtn = h('button', { type: 'button', class: 'btn btn-small', 'aria-expanded': 'false' }, 'Edit');
    this.histBtn = h('button', { type: 'button', class: 'btn btn-small', 'aria-expanded': 'false' }, 'History');
    const restart = h('button', { type: 'button', class: 'btn btn-small' }, 'Restart');
    const del = h('button', { type: 'button', class: 'btn btn-small btn-danger-outline' }, 'Delete');
    this.authBtn = h('button', { type: 'button', class: 'btn btn-small btn-primary', hidden: true }, 'Authorize');
    this.authBtn.addEventListener('click', () => void this.authorize());
    this.authNote = h('p', { class: 'srv-auth', role: 'status', hidden: true });
    this.pins = new PinsBox(() => ({ ref: this.cfg.id || key(this.cfg), name: this.cfg.name }));
    this.toolsBtn.addEventListener('click', () => this.show('tools'));
    this.editBtn.addEventListener('click', () => this.show('edit'));
    this.histBtn.addEventListener('click', () => this.show('history'));
    restart.addEventListener('click', () => void this.restart(restart));
    del.addEventListener('click', () => void this.remove());
    this.panel.id = uid('panel');
    for (const b of [this.toolsBtn, this.editBtn, this.histBtn]) b.setAttribute('aria-controls', this.panel.id);
    this.el = h('li', { class: 'srv card', 'aria-labelledby': titleId },
      h('div', { class: 'srv-head' }, this.sw, this.title, this.badge),
      this.detail, this.authNote, this.meta, this.pins.el,
      h('div', { class: 'srv-actions' }, this.authBtn, this.toolsBtn, this.editBtn, this.histBtn, restart, del),
      this.panel);
    this.update(cfg);
  }

  /** toolChanged reloads the pending tool changes when server is this one. */
  toolChanged(server: string): void {
    if (server === key(this.cfg) && !this.goneControls) void this.pins.load();
  }

  /**
   * setGone marks the row of a server no longer listed (removed) or, when
   * it is listed again, unmarks it. The row keeps its place and its size:
   * its badge says Removed and its controls are disabled.
   */
  setGone(gone: boolean): void {
    if (gone === (this.goneControls !== null)) return;
    if (gone) {
      this.goneControls = [...this.el.querySelectorAll<HTMLElement>('button, input, select, textarea')].filter((c) => !(c as HTMLButtonElement).disabled);
      for (const c of this.goneControls) (c as HTMLButtonElement).disabled = true;
      this.el.classList.add('srv-gone');
      this.badge.textContent = 'Removed';
      this.badge.className = 'badge badge-disabled';
      return;
    }
    for (const c of this.goneControls ?? []) (c as HTMLButtonElement).disabled = false;
    this.goneControls = null;
    this.el.classList.remove('srv-gone');
  }

  update(cfg: McpConfig): void {
    if (this.goneControls) return; // a removed server's row stays as it was marked
    this.cfg = cfg;
    const st = store.status.get(key(cfg));
    this.title.textContent = cfg.name;
    // While a toggle is under way the switch shows the state asked for: a
    // status event (the server stopping) redraws the row before the
    // request's answer brings the new config.
    if (!this.busy) this.sw.setAttribute('aria-checked', String(cfg.enabled));
    this.sw.setAttribute('aria-label', 'Enable ' + cfg.name);
    const b = badgeOf(cfg, st);
    this.badge.textContent = b.label;
    this.badge.className = 'badge badge-' + b.cls;
    const parts: (Node | string)[] = [];
    if (cfg.enabled && st?.state === 'starting') parts.push('Starting…');
    if (cfg.enabled && st?.state === 'error') {
      parts.push(st.message || st.code || 'The server failed.');
      parts.push(' ', this.retry);
    }
    clear(this.detail, parts);
    this.detail.className = 'srv-detail' + (st?.state === 'error' && cfg.enabled ? ' err' : '');
    this.detail.hidden = parts.length === 0;
    this.updateRetry();
    const pkg = cfg.package?.type === 'http' || cfg.transport?.type === 'http' ? cfg.transport?.url || cfg.package?.identifier : `${cfg.package?.type ?? ''} ${cfg.package?.identifier ?? ''}`;
    const tools = st?.tools?.length ? ` · ${st.tools.length} tools` : '';
    const calls = st?.calls ? ` · ${st.calls} calls, ${st.errors ?? 0} errors` : '';
    this.meta.textContent = `${cfg.slug ?? ''} · ${pkg}${tools}${calls}`;
    if (st?.state === 'running') this.refused = false;
    if ((st?.state ?? '') !== this.lastState) {
      this.lastState = st?.state ?? '';
      void this.pins.load();
    }
    this.askTokens();
    this.authBtn.hidden = !this.needsAuth(st);
    this.authBtn.setAttribute('aria-label', 'Authorize ' + cfg.name);
  }

  // A remote server whose credentials were refused (UNAUTHORIZED: no
  // OAuth tokens yet, or tokens that no longer work) can be authorized.
  private needsAuth(st: Status | undefined): boolean {
    const remote = this.cfg.transport?.type === 'http';
    return remote && (this.flow !== null || this.refused || this.hasTokens === false || (st?.state === 'error' && st.code === 'UNAUTHORIZED'));
  }

  // askTokens reads, once, whether a remote server with auth_type oauth has
  // its tokens stored (the description names no value).
  private askTokens(): void {
    if (this.askedTokens || this.cfg.transport?.type !== 'http' || this.cfg.auth_type !== 'oauth') return;
    this.askedTokens = true;
    void api<{ oauth?: unknown }>('GET', `/api/v1/servers/${enc(this.cfg.id || key(this.cfg))}/credentials`)
      .then((d) => {
        this.hasTokens = !!d?.oauth;
        this.update(this.cfg);
      })
      .catch(() => {});
  }

  private noteAuth(text: string, link?: string, err = false): void {
    clear(this.authNote, link ? [text, ' ', h('a', { href: link, target: '_blank', rel: 'noopener noreferrer' }, 'Open the authorization page')] : [text]);
    this.authNote.className = 'srv-auth' + (err ? ' err' : '');
    this.authNote.hidden = false;
  }

  private refusedBy(e: unknown): boolean {
    if (e instanceof ApiError && e.status === 401 && e.code === 'UNAUTHORIZED' && this.cfg.transport?.type === 'http') {
      this.refused = true;
      this.update(this.cfg);
      return true;
    }
    return false;
  }

  // authorize starts the OAuth flow (POST /api/v1/servers/{id}/auth), opens
  // the authorization page in a new tab and follows the outcome
  // (events.oauth.<server>): authorized, the server is enabled (or
  // restarted by the gateway) and its status shows it; failed, the message.
  private async authorize(): Promise<void> {
    this.flow?.abort();
    const flow = new AbortController();
    this.flow = flow;
    this.authBtn.disabled = true;
    const slug = key(this.cfg);
    const done = (text: string, err: boolean) => {
      if (this.flow !== flow) return;
      flow.abort();
      this.flow = null;
      this.authBtn.disabled = false;
      this.noteAuth(text, undefined, err);
      this.update(this.cfg);
    };
    // Listen before starting, so the outcome cannot slip past.
    const opened = new Promise<void>((resolve) => {
      follow('/api/v1/events?kinds=oauth', (e) => {
        let ev: { data?: OAuthEvent };
        try {
          ev = JSON.parse(e.data);
        } catch {
          return;
        }
        const o = ev.data;
        // The server's own flow only: a user's own flow of the same server
        // (principal set) says nothing of this one.
        if (!o || o.server !== slug || o.principal) return;
        if (o.type === 'authorized') {
          this.refused = false;
          this.hasTokens = true;
          done(`Authorized ${this.cfg.name}. Connecting…`, false);
          void this.afterAuthorized();
        } else {
          done(o.message || 'Authorization failed. Please try again.', true);
        }
      }, flow.signal, resolve);
    });
    const ready = await Promise.race([opened.then(() => true), new Promise<boolean>((r) => window.setTimeout(() => r(false), 10_000))]);
    if (!ready) {
      done('Could not follow the authorization (the event stream did not open). Try again.', true);
      return;
    }
    let out: OAuthStartReply;
    try {
      out = await api<OAuthStartReply>('POST', `/api/v1/servers/${enc(this.cfg.id || slug)}/auth`);
    } catch (e) {
      done((e as Error).message, true);
      return;
    }
    window.open(out.authorization_url, '_blank', 'noopener,noreferrer');
    this.noteAuth(`Waiting for you to approve ${this.cfg.name} in the new tab…`, out.authorization_url);
    const wait = Math.max(0, new Date(out.expires_at).getTime() - Date.now()) + 5_000;
    window.setTimeout(() => done('Authorization timed out after 2 minutes.', true), wait);
  }

  // afterAuthorized enables a server the refused enable left disabled (an
  // enabled one is restarted by the gateway with its new tokens).
  private async afterAuthorized(): Promise<void> {
    try {
      if (!this.cfg.enabled) {
        const cfg = await api<McpConfig>('POST', `/api/v1/servers/${enc(this.cfg.id || key(this.cfg))}/enable`);
        setServer(cfg);
      }
      await refreshStatus();
      this.noteAuth(`Authorized ${this.cfg.name}.`);
    } catch (e) {
      this.refusedBy(e);
      this.noteAuth(`${this.cfg.name}: ${(e as Error).message}`, undefined, true);
    }
  }

  updateRetry(): void {
    const st = store.status.get(key(this.cfg));
    if (!st?.retry_at || st.state !== 'error') {
      this.retry.textContent = '';
      return;
    }
    const s = Math.max(0, Math.round((new Date(st.retry_at).getTime() - Date.now()) / 1000));
    this.retry.textContent = s > 0 ? `Next retry in ${s}s (${new Date(st.retry_at).toLocaleTimeString()}).` : 'Retrying…';
  }

  private async toggle(): Promise<void> {
    if (this.busy) return;
    const on = !this.cfg.enabled;
    this.busy = true;
    this.sw.setAttribute('aria-busy', 'true');
    this.sw.setAttribute('aria-checked', String(on));
    try {
      const cfg = await api<McpConfig>('POST', `/api/v1/servers/${enc(this.cfg.id || key(this.cfg))}/${on ? 'enable' : 'disable'}`);
      setServer(cfg);
      void refreshStatus().catch(() => {});
    } catch (e) {
      this.sw.setAttribute('aria-checked', String(this.cfg.enabled));
      if (this.refusedBy(e)) toast(`${this.cfg.name}: ${(e as Error).message} Use Authorize if it signs in with OAuth.`, 'error');
      else if (!(e instanceof ApiError && e.status === 401)) toast(`${this.cfg.name}: ${(e as Error).message}`, 'error');
      void refreshServers().catch(() => {});
    } finally {
      this.busy = false;
      this.sw.removeAttribute('aria-busy');
    }
  }

  private async restart(btn: HTMLButtonElement): Promise<void> {
    btn.disabled = true;
    try {
      const st = await api<Status>('POST', `/api/v1/servers/${enc(this.cfg.id || key(this.cfg))}/restart`);
      if (st && st.server) setStatus(st);
      toast(`${this.cfg.name} restarted.`);
    } catch (e) {
      if (this.refusedBy(e) || !(e instanceof ApiError && e.status === 401)) toast(`${this.cfg.name} failed to restart. Check settings. (${(e as Error).message})`, 'error');
    } finally {
      btn.disabled = false;
    }
  }

  private async remove(): Promise<void> {
    const ok = await confirmDialog({
      title: `Delete "${this.cfg.name}"?`,
      body: h('p', null, 'This will remove the MCP and its stored credentials.'),
      confirm: 'Delete',
      danger: true,
    });
    if (!ok) return;
    try {
      await api('DELETE', `/api/v1/servers/${enc(this.cfg.id || key(this.cfg))}`);
      removeServer(this.cfg.id || key(this.cfg));
      toast(`Deleted ${this.cfg.name}.`);
      (document.querySelector('main h1') as HTMLElement | null)?.focus();
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) toast(`Deleting ${this.cfg.name}: ${(e as Error).message}`, 'error');
    }
  }

  private show(what: 'tools' | 'edit' | 'history'): void {
    const btns = { tools: this.toolsBtn, edit: this.editBtn, history: this.histBtn };
    if (this.open === what) {
      this.open = null;
      this.panel.hidden = true;
      btns[what].setAttribute('aria-expanded', 'false');
      return;
    }
    this.open = what;
    for (const [k, b] of Object.entries(btns)) b.setAttribute('aria-expanded', String(k === what));
    this.panel.hidden = false;
    clear(this.panel, h('p', { class: 'muted' }, 'Loading…'));
    if (what === 'tools') void this.loadTools();
    else if (what === 'edit') this.renderEdit();
    else void this.loadHistory();
  }

  private async loadTools(): Promise<void> {
    try {
      const r = await api<{ tools: ToolInfo[] }>('GET', '/mcp/tools');
      const prefix = key(this.cfg) + '__';
      const tools = (r.tools ?? []).filter((t) => t.name.startsWith(prefix)).sort((a, b) => a.name.localeCompare(b.name));
      if (!tools.length) {
        const st = store.status.get(key(this.cfg));
        clear(this.panel, h('p', { class: 'muted' }, this.cfg.enabled ? (st?.state === 'running' ? 'This server lists no tools.' : 'No tools known yet: the server has not started.') : 'The server is disabled: enable it to see its tools.'));
        return;
      }
      clear(this.panel, h('h3', null, `Tools (${tools.length})`), h('ul', { class: 'tools', 'aria-label': `Tools of ${this.cfg.name}` }, tools.map((t) =>
        h('li', { class: 'tool' },
          h('div', { class: 'tool-name' }, reveal(t.name.slice(prefix.length))),
          t.description ? h('p', { class: 'tool-desc' }, reveal(t.description)) : null,
          h('details', null, h('summary', null, 'Input schema'), h('pre', { class: 'schema', tabindex: '0' }, revealJSON(t.parameters)))))));
    } catch (e) {
      clear(this.panel, h('p', { class: 'form-error', role: 'alert' }, (e as Error).message));
    }
  }

  private renderEdit(): void {
    const cfg = this.cfg;
    const rt = cfg.runtime ?? {};
    const fields: Record<string, Field> = {
      allow: field('Allowed tools', h('textarea', { rows: '3', value: (cfg.tools?.allow ?? []).join('\n') }), 'Globs on the tool name, one a line; empty: every tool.', 'tools.allow'),
      deny: field('Denied tools', h('textarea', { rows: '3', value: (cfg.tools?.deny ?? []).join('\n') }), 'Globs on the tool name, one a line.', 'tools.deny'),
      call: field('Call timeout', h('input', { type: 'text', value: rt.call_timeout ?? '', placeholder: 'runner default (30s)' }), 'A duration such as 30s or 2m.', 'runtime.call_timeout'),
      startT: field('Start timeout', h('input', { type: 'text', value: rt.start_timeout ?? '', placeholder: 'runner default' }), undefined, 'runtime.start_timeout'),
      idle: field('Idle timeout', h('input', { type: 'text', value: rt.idle_timeout ?? '', placeholder: 'runner default (30m)' }), 'Stop after this long without calls; negative: never.', 'runtime.idle_timeout'),
      inflight: field('Max calls at once', h('input', { type: 'number', min: '0', max: '10000', value: rt.max_inflight ? String(rt.max_inflight) : '' }), undefined, 'runtime.max_inflight'),
      replicas: field('Replicas', h('input', { type: 'number', min: '0', max: '64', value: rt.replicas ? String(rt.replicas) : '' }), undefined, 'runtime.replicas'),
    };
    const eager = h('input', { type: 'checkbox', checked: !!rt.eager, id: uid('eager') });
    const err = formError();
    const save = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Save');
    const cancel = h('button', { type: 'button', class: 'btn' }, 'Cancel');
    cancel.addEventListener('click', () => this.show('edit'));
    const form = h('form', { class: 'edit-form', novalidate: true, 'aria-label': `Edit ${cfg.name}` },
      h('h3', null, 'Edit'),
      h('div', { class: 'grid2' }, fields.allow.row, fields.deny.row),
      h('div', { class: 'grid3' }, fields.call.row, fields.startT.row, fields.idle.row, fields.inflight.row, fields.replicas.row),
      h('div', { class: 'check' }, eager, h('label', { for: eager.id }, 'Start eagerly (as soon as a runner owns it)')),
      err, h('div', { class: 'actions' }, cancel, save));
    const lines = (v: string) => v.split('\n').map((s) => s.trim()).filter(Boolean);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      Object.values(fields).forEach((f) => setFieldError(f, null));
      showError(err, null);
      const num = (f: Field) => (f.input.value.trim() === '' ? undefined : Number(f.input.value));
      // Go durations ("30s", "1m30s"): checked here, the API only says the body is not valid.
      let bad = false;
      for (const f of [fields.call, fields.startT, fields.idle]) {
        const v = f.input.value.trim();
        if (v && !/^-?(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$/.test(v)) {
          setFieldError(f, 'Not a duration: write it as 30s, 2m or 1h30m.');
          if (!bad) f.input.focus();
          bad = true;
        }
      }
      if (bad) return;
      const next: McpConfig = {
        ...cfg,
        tools: { allow: lines(fields.allow.input.value), deny: lines(fields.deny.input.value) },
        runtime: {
          ...rt,
          call_timeout: fields.call.input.value.trim() || undefined,
          start_timeout: fields.startT.input.value.trim() || undefined,
          idle_timeout: fields.idle.input.value.trim() || undefined,
          max_inflight: num(fields.inflight),
          replicas: num(fields.replicas),
          eager: eager.checked || undefined,
        },
      };
      save.disabled = true;
      try {
        const out = await api<McpConfig>('PUT', `/api/v1/servers/${enc(cfg.id || key(cfg))}`, { config: next });
        setServer(out);
        toast(`Saved ${out.name}.`);
        this.show('edit');
      } catch (e) {
        reportFormError(e, fields, err);
      } finally {
        save.disabled = false;
      }
    });
    clear(this.panel, form);
    fields.allow.input.focus();
  }

  private async loadHistory(): Promise<void> {
    try {
      // version: the server's own number (1, 2, 3…); revision is the store's, shared by all servers.
      const r = await api<{ revisions: { version: number; revision: number; operation: string; at: string; config?: McpConfig }[] }>('GET', `/api/v1/servers/${enc(this.cfg.id || key(this.cfg))}/history`);
      const revs = [...(r.revisions ?? [])].reverse();
      const rows = revs.map((rev) => {
        const current = rev.revision === this.cfg.revision;
        const btn = current || rev.operation !== 'put' || !rev.config ? null : h('button', { type: 'button', class: 'btn btn-small' }, `Roll back to ${rev.version}`);
        btn?.addEventListener('click', async () => {
          const ok = await confirmDialog({ title: `Roll back "${this.cfg.name}"?`, body: h('p', null, `The config becomes what it was at version ${rev.version} (written as the next version).`), confirm: 'Roll back' });
          if (!ok) return;
          try {
            const cfg = await api<McpConfig>('POST', `/api/v1/servers/${enc(this.cfg.id || key(this.cfg))}/rollback`, { version: rev.version });
            if (cfg && cfg.id) setServer(cfg);
            else void refreshServers();
            toast(`Rolled ${this.cfg.name} back to version ${rev.version}.`);
            void this.loadHistory();
          } catch (e) {
            if (!(e instanceof ApiError && e.status === 401)) toast((e as Error).message, 'error');
          }
        });
        const c = rev.config;
        const summary = c ? [
          c.enabled ? 'enabled' : 'disabled',
          `${c.package?.type ?? ''} ${c.package?.identifier ?? c.transport?.url ?? ''}`,
          c.tools?.allow?.length ? 'allow ' + c.tools.allow.join(', ') : '',
          c.tools?.deny?.length ? 'deny ' + c.tools.deny.join(', ') : '',
          c.runtime?.call_timeout ? 'call timeout ' + c.runtime.call_timeout : '',
          c.runtime?.start_timeout ? 'start timeout ' + c.runtime.start_timeout : '',
          c.runtime?.idle_timeout ? 'idle timeout ' + c.runtime.idle_timeout : '',
        ].filter(Boolean).join(' · ') : '';
        return h('tr', null,
          h('td', null, String(rev.version), current ? ' (current)' : ''),
          h('td', null, rev.operation),
          h('td', null, fmtTime(rev.at)),
          h('td', null, summary),
          h('td', null, btn));
      });
      clear(this.panel, h('h3', null, 'History'), h('div', { class: 'table-wrap' }, h('table', null,
        h('caption', { class: 'sr-only' }, `Versions of ${this.cfg.name}, newest first`),
        h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Version'), h('th', { scope: 'col' }, 'Change'), h('th', { scope: 'col' }, 'When'), h('th', { scope: 'col' }, 'Config'), h('th', { scope: 'col' }, h('span', { class: 'sr-only' }, 'Actions')))),
        h('tbody', null, rows))));
    } catch (e) {
      clear(this.panel, h('p', { class: 'form-error', role: 'alert' }, (e as Error).message));
    }
  }
}
