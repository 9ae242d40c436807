// Keys and agents (admin): API keys (the new key shown once, with a copy
// button), and the agents' bus identities.
import { api, ApiError, enc } from './api';
import { clear, confirmDialog, field, fmtTime, formError, h, pageHeading, setFieldError, showError, toast, uid, type Field, reportFormError } from './dom';

interface APIKey {
  id: string;
  name: string;
  scopes: string[];
  tools?: { allow?: string[]; deny?: string[] };
  tools_mode?: string;
  pinned_tools?: string[];
  created_at: string;
  revoked_at?: string;
}
interface Agent {
  name: string;
  allow: string[];
  created: string;
  seed_file: string;
  inbox_prefix: string;
  subjects?: string[];
}

const lines = (v: string) => v.split(/[\n,]/).map((s) => s.trim()).filter(Boolean);

export function keysPage(main: HTMLElement): () => void {
  const ctl = new AbortController();
  main.append(pageHeading('Keys and agents'));
  const keys = h('section', { 'aria-labelledby': 'keys-h', class: 'card' });
  const agents = h('section', { 'aria-labelledby': 'agents-h', class: 'card' });
  main.append(keys, agents);
  renderKeys(keys, ctl.signal);
  renderAgents(agents, ctl.signal);
  return () => ctl.abort();
}

function renderKeys(box: HTMLElement, signal: AbortSignal): void {
  const name = field('Name', h('input', { type: 'text', autocomplete: 'off' }), undefined, 'name');
  const scopeBox = h('fieldset', { class: 'inline' }, h('legend', null, 'Scopes'),
    (['admin', 'call', 'chat'] as const).map((s) => {
      const id = uid('sc');
      return h('span', { class: 'check' }, h('input', { type: 'checkbox', id, value: s, checked: s === 'call' }), h('label', { for: id }, s));
    }));
  const tools = field('Allowed tools', h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'e.g. everything__*' }), 'Globs on <server>__<tool>, separated by commas; empty: every tool.', 'tools.allow tools');
  const mode = field('Tool listing', h('select', null,
    h('option', { value: '' }, 'every tool'),
    h('option', { value: 'search' }, 'search mode (search_tools and call_tool)')), 'What this key\'s /mcp lists; search mode suits catalogs too big for a model.', 'tools_mode');
  const pins = field('Pinned tools', h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'e.g. github__create_issue' }), 'Search mode only: <server>__<tool> names always listed, separated by commas.', 'pinned_tools');
  const err = formError();
  const created = h('div', { class: 'created', hidden: true });
  const create = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Create key');
  const form = h('form', { novalidate: true, 'aria-label': 'Create an API key', class: 'inline-form' }, name.row, scopeBox, tools.row, mode.row, pins.row, err, h('div', { class: 'actions' }, create));
  const body = h('tbody');
  const showRevoked = h('input', { type: 'checkbox', id: uid('rv') });
  const fields: Record<string, Field> = { name, tools, tools_mode: mode, pinned_tools: pins };
  box.append(h('h2', { id: 'keys-h' }, 'API keys'), form, created,
    h('div', { class: 'check' }, showRevoked, h('label', { for: showRevoked.id }, 'Show revoked keys')),
    h('div', { class: 'table-wrap' }, h('table', null, h('caption', { class: 'sr-only' }, 'API keys'),
      h('thead', null, h('tr', null, ['Name', 'Id', 'Scopes', 'Created', 'Status', ''].map((c) => h('th', { scope: 'col' }, c || h('span', { class: 'sr-only' }, 'Actions'))))), body)));

  const load = async () => {
    try {
      const r = await api<{ keys: APIKey[] }>('GET', '/api/v1/keys' + (showRevoked.checked ? '?include_revoked=true' : ''), undefined, { signal });
      const list = r.keys ?? [];
      clear(body, list.length ? list.map((k) => {
        const revoked = !!k.revoked_at && new Date(k.revoked_at).getFullYear() > 2000;
        const btn = revoked ? null : h('button', { type: 'button', class: 'btn btn-small btn-danger-outline', 'aria-label': `Revoke ${k.name || k.id}` }, 'Revoke');
        btn?.addEventListener('click', async () => {
          const ok = await confirmDialog({ title: `Revoke "${k.name || k.id}"?`, body: h('p', null, 'Every client using this key loses access at once. This cannot be undone.'), confirm: 'Revoke', danger: true });
          if (!ok) return;
          try {
            await api('DELETE', `/api/v1/keys/${enc(k.id)}`);
            toast(`Revoked ${k.name || k.id}.`);
            void load();
          } catch (e) {
            if (!(e instanceof ApiError && e.status === 401)) toast((e as Error).message, 'error');
          }
        });
        return h('tr', null, h('td', null, k.name), h('td', { class: 'mono' }, k.id), h('td', null, (k.scopes ?? []).join(', ') + (k.tools_mode === 'search' ? ' · search mode' : '')), h('td', null, fmtTime(k.created_at)), h('td', null, revoked ? `revoked ${fmtTime(k.revoked_at)}` : 'active'), h('td', null, btn));
      }) : h('tr', null, h('td', { colspan: '6', class: 'muted' }, 'No keys.')));
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      clear(body, h('tr', null, h('td', { colspan: '6', class: 'form-error' }, (e as Error).message)));
    }
  };
  showRevoked.addEventListener('change', () => void load());

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    Object.values(fields).forEach((f) => setFieldError(f, null));
    showError(err, null);
    const scopes = [...scopeBox.querySelectorAll('input:checked')].map((i) => (i as HTMLInputElement).value);
    const allow = lines(tools.input.value);
    const pinned = lines(pins.input.value);
    const toolsMode = (mode.input as HTMLSelectElement).value;
    create.disabled = true;
    try {
      const r = await api<APIKey & { key: string }>('POST', '/api/v1/keys', {
        name: name.input.value.trim(), scopes, ...(allow.length ? { tools: { allow } } : {}),
        ...(toolsMode ? { tools_mode: toolsMode } : {}), ...(pinned.length ? { pinned_tools: pinned } : {}),
      });
      const out = h('input', { type: 'text', readOnly: true, value: r.key, class: 'mono', id: uid('newkey') });
      const copy = h('button', { type: 'button', class: 'btn btn-small' }, 'Copy');
      copy.addEventListener('click', async () => {
        out.select();
        try {
          await navigator.clipboard.writeText(r.key);
        } catch {
          document.execCommand('copy');
        }
        copy.textContent = 'Copied';
      });
      clear(created, h('p', { role: 'status' }, h('strong', null, `Key "${r.name}" created.`), ' Copy it now: it is shown only this once.'),
        h('div', { class: 'copy-row' }, h('label', { for: out.id, class: 'sr-only' }, 'New API key'), out, copy));
      created.hidden = false;
      name.input.value = '';
      tools.input.value = '';
      pins.input.value = '';
      (mode.input as HTMLSelectElement).value = '';
      out.focus();
      out.select();
      void load();
    } catch (e) {
      reportFormError(e, fields, err);
    } finally {
      create.disabled = false;
    }
  });
  void load();
}

function renderAgents(box: HTMLElement, signal: AbortSignal): void {
  const name = field('Agent name', h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false' }), 'a-z, 0-9, - and _, at most 50 characters.', 'name');
  const allow = field('Allowed tools', h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'e.g. everything__*' }), 'Globs on <server>__<tool>, separated by commas; empty: every tool.', 'allow');
  const fields: Record<string, Field> = { name, allow };
  const err = formError();
  const created = h('div', { class: 'created', hidden: true });
  const unavailable = h('p', { class: 'notice', hidden: true, role: 'status' });
  const create = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Create agent');
  const form = h('form', { novalidate: true, 'aria-label': 'Create an agent', class: 'inline-form' }, name.row, allow.row, err, h('div', { class: 'actions' }, create));
  const body = h('tbody');
  box.append(h('h2', { id: 'agents-h' }, 'Agents'),
    h('p', { class: 'muted' }, 'Agents connect to the bus directly with their own identity; the seed stays on the host of mcpbus up.'),
    unavailable, form, created,
    h('div', { class: 'table-wrap' }, h('table', null, h('caption', { class: 'sr-only' }, 'Agents'),
      h('thead', null, h('tr', null, ['Name', 'Allowed tools', 'Created', 'Inbox prefix', 'Seed file', ''].map((c) => h('th', { scope: 'col' }, c || h('span', { class: 'sr-only' }, 'Actions'))))), body)));

  const load = async () => {
    try {
      const r = await api<{ agents: Agent[] }>('GET', '/api/v1/agents', undefined, { signal });
      unavailable.hidden = true;
      const list = r.agents ?? [];
      clear(body, list.length ? list.map((a) => {
        const btn = h('button', { type: 'button', class: 'btn btn-small btn-danger-outline', 'aria-label': `Revoke agent ${a.name}` }, 'Revoke');
        btn.addEventListener('click', async () => {
          const ok = await confirmDialog({ title: `Revoke agent "${a.name}"?`, body: h('p', null, 'The agent is disconnected at once and its identity deleted.'), confirm: 'Revoke', danger: true });
          if (!ok) return;
          try {
            await api('DELETE', `/api/v1/agents/${enc(a.name)}`);
            toast(`Revoked agent ${a.name}.`);
            void load();
          } catch (e) {
            if (!(e instanceof ApiError && e.status === 401)) toast((e as Error).message, 'error');
          }
        });
        return h('tr', null, h('td', null, a.name), h('td', null, (a.allow ?? []).join(', ') || 'every tool'), h('td', null, fmtTime(a.created)), h('td', { class: 'mono' }, a.inbox_prefix), h('td', { class: 'mono' }, a.seed_file), h('td', null, btn));
      }) : h('tr', null, h('td', { colspan: '6', class: 'muted' }, 'No agents.')));
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      if (e instanceof ApiError && e.status === 503) {
        showError(unavailable, e.message);
        form.hidden = true;
        clear(body, h('tr', null, h('td', { colspan: '6', class: 'muted' }, 'Not available on this deployment.')));
        return;
      }
      clear(body, h('tr', null, h('td', { colspan: '6', class: 'form-error' }, (e as Error).message)));
    }
  };

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    Object.values(fields).forEach((f) => setFieldError(f, null));
    showError(err, null);
    create.disabled = true;
    try {
      const list = lines(allow.input.value);
      const a = await api<Agent>('POST', '/api/v1/agents', { name: name.input.value.trim(), ...(list.length ? { allow: list } : {}) });
      clear(created, h('p', { role: 'status' }, h('strong', null, `Agent "${a.name}" created.`), ` Its seed file is ${a.seed_file} on the host of mcpbus up; its inbox prefix is ${a.inbox_prefix}.`));
      created.hidden = false;
      name.input.value = '';
      allow.input.value = '';
      void load();
    } catch (e) {
      reportFormError(e, fields, err);
    } finally {
      create.disabled = false;
    }
  });
  void load();
}
