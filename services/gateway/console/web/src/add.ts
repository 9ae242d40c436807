// Add: a pasted npx command, docker image or HTTP URL, or a registry search
// (Official / Smithery / both) with source badges; Next per seeds/002 §1.2;
// then Configure (§1.4–1.7): name, auth per detected type, the plan's inputs.
import { api, ApiError, enc, type McpConfig } from './api';
import { clear, field, formError, h, pageHeading, setFieldError, showError, toast, uid, type Field, matchField } from './dom';
import { setServer } from './store';
import { reveal } from './text';
import { runKey, whatRuns } from './runs';

interface RegistryResult {
  name: string;
  qualified_name?: string;
  title?: string;
  description?: string;
  version?: string;
  sources: string[];
  verified: boolean;
  use_count: number;
  remote?: boolean;
}
interface SearchReply {
  results: RegistryResult[];
  total: number;
  has_more: boolean;
  stale?: boolean;
  warnings?: { source: string; code: string; message: string }[];
}
interface PlanCredential {
  kind: string;
  name: string;
  description?: string;
  required: boolean;
  template?: string;
}
interface PlanInput {
  name: string;
  kind: string;
  description?: string;
  required: boolean;
  format?: string;
  default?: string;
  choices?: string[];
  value?: string;
}
interface InstallPlan {
  source: string;
  name: string;
  qualified_name?: string;
  version?: string;
  title?: string;
  description?: string;
  package: { type: string; registry_type: string; identifier: string; version?: string; url?: string };
  credentials: PlanCredential[] | null;
  inputs: PlanInput[] | null;
  missing?: string[];
  auth_type: string;
  ready: boolean;
  draft?: McpConfig;
  warnings?: string[];
}
interface PlanRequest {
  name: string;
  registry: string;
  version?: string;
  prefer?: string;
  variables?: Record<string, string>;
}

const SOURCE_LABEL: Record<string, string> = { official: 'Official', smithery: 'Smithery' };

// Kept while the page is open so Cancel on Configure returns to the same search.
let lastQuery = { url: '', registry: '', q: '' };

export function addPage(main: HTMLElement): () => void {
  const ctl = new AbortController();
  renderChoose(main, ctl.signal);
  return () => ctl.abort();
}

function renderChoose(main: HTMLElement, signal: AbortSignal): void {
  main.replaceChildren();
  const url = field('URL', h('input', { type: 'text', value: lastQuery.url, autocomplete: 'off', spellcheck: 'false' }), 'Paste an npx command, a docker image or an HTTP URL.');
  const reg = h('select', null,
    h('option', { value: '' }, 'Select…'),
    h('option', { value: 'official' }, 'Official'),
    h('option', { value: 'smithery' }, 'Smithery'),
    h('option', { value: 'both' }, 'Both'));
  reg.value = lastQuery.registry;
  const regF = field('Registry', reg);
  const q = h('input', { type: 'search', value: lastQuery.q, autocomplete: 'off', disabled: !lastQuery.registry });
  const qF = field('Search', q, '(select registry first)');
  const searchBtn = h('button', { type: 'submit', class: 'btn', disabled: !lastQuery.registry }, 'Search');
  const status = h('p', { class: 'muted', role: 'status' });
  const results = h('div', { class: 'results', role: 'radiogroup', 'aria-label': 'Search results' });
  const err = formError();
  const next = h('button', { type: 'button', class: 'btn btn-primary', disabled: true }, 'Next');
  let selected: RegistryResult | null = null;

  const updNext = () => {
    next.disabled = !(url.input.value.trim() || selected);
  };
  url.input.addEventListener('input', () => {
    lastQuery.url = url.input.value;
    if (url.input.value.trim() && selected) {
      selected = null;
      for (const r of results.querySelectorAll('input')) (r as HTMLInputElement).checked = false;
      for (const r of results.querySelectorAll('.result')) r.classList.remove('selected');
    }
    setFieldError(url, null);
    updNext();
  });
  reg.addEventListener('change', () => {
    lastQuery.registry = reg.value;
    q.disabled = searchBtn.disabled = !reg.value;
    if (qF.row.querySelector('.hint')) (qF.row.querySelector('.hint') as HTMLElement).hidden = !!reg.value;
    if (reg.value && q.value.trim()) void search();
  });
  (qF.row.querySelector('.hint') as HTMLElement).hidden = !!reg.value;

  let searchCtl: AbortController | null = null;
  const search = async () => {
    const text = q.value.trim();
    lastQuery.q = q.value;
    if (!reg.value || !text) return;
    searchCtl?.abort();
    searchCtl = new AbortController();
    signal.addEventListener('abort', () => searchCtl?.abort());
    status.textContent = 'Searching…';
    showError(err, null);
    try {
      const r = await api<SearchReply>('GET', `/api/v1/registry/search?q=${enc(text)}&registry=${enc(reg.value)}&page_size=30`, undefined, { signal: searchCtl.signal });
      selected = null;
      updNext();
      const warn = (r.warnings ?? []).map((w) => `${SOURCE_LABEL[w.source] ?? w.source}: ${w.message}`).join(' ');
      status.textContent = `${r.results.length} result${r.results.length === 1 ? '' : 's'}${r.has_more ? ' (more available: refine the search)' : ''}.${r.stale ? ' Some results are from the cache.' : ''}${warn ? ' ' + warn : ''}`;
      const group = uid('res');
      clear(results, r.results.map((res) => {
        const id = uid('r');
        const radio = h('input', { type: 'radio', name: group, id, value: res.name, class: 'sr-radio' });
        const row = h('div', { class: 'result' },
          radio,
          h('label', { for: id },
            h('span', { class: 'result-title' }, reveal(res.title || res.name),
              res.sources.map((s) => h('span', { class: 'src-badge src-' + s }, `[${SOURCE_LABEL[s] ?? s}]`)),
              res.verified ? h('span', { class: 'verified' }, '✓ verified') : null),
            res.title && res.title !== res.name ? h('span', { class: 'result-name' }, reveal(res.name + (res.version ? ' ' + res.version : ''))) : res.version ? h('span', { class: 'result-name' }, 'version ' + reveal(res.version)) : null,
            res.description ? h('span', { class: 'result-desc' }, res.description) : null));
        radio.addEventListener('change', () => {
          if (!radio.checked) return;
          selected = res;
          for (const x of results.querySelectorAll('.result')) x.classList.remove('selected');
          row.classList.add('selected');
          if (url.input.value) {
            url.input.value = '';
            lastQuery.url = '';
          }
          updNext();
        });
        return row;
      }));
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      status.textContent = '';
      showError(err, (e as Error).message);
    }
  };
  const searchForm = h('form', { class: 'search', role: 'search', 'aria-label': 'Search the registries', novalidate: true }, regF.row, h('div', { class: 'search-row' }, qF.row, searchBtn));
  searchForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    void search();
  });

  next.addEventListener('click', async () => {
    showError(err, null);
    const text = url.input.value.trim();
    if (text) {
      const cfg = parseSource(text);
      if (!cfg) {
        setFieldError(url, 'Not an npx command, docker image or http(s) URL.');
        url.input.focus();
        return;
      }
      renderConfigure(main, signal, { manual: cfg });
      return;
    }
    if (!selected) return;
    next.disabled = true;
    status.textContent = 'Reading the install plan…';
    try {
      const req = planRequest(selected);
      const plan = await api<InstallPlan>('POST', '/api/v1/registry/plan', req, { signal });
      renderConfigure(main, signal, { plan, req });
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      status.textContent = '';
      showError(err, (e as Error).message);
      next.disabled = false;
    }
  });
  updNext();

  main.append(
    pageHeading('Add MCP server'),
    h('div', { class: 'card add' },
      url.row,
      h('p', { class: 'or' }, '— or search registry —'),
      searchForm, status, results, err,
      h('div', { class: 'actions' }, next)));
  if (reg.value && q.value.trim()) void search();
}

// fillTemplate puts a typed secret into its credential's template ("Bearer
// {token}" → "Bearer <value>"), as `mcpbus add` does; a value already in
// that form, or a template of another shape, is left as it is.
function fillTemplate(template: string | undefined, value: string): string {
  const m = template ? /^([^{}]*)\{[^{}]+\}([^{}]*)$/.exec(template) : null;
  if (!m) return value;
  const [, before, after] = m;
  if (value.startsWith(before) && value.endsWith(after) && value.length > before.length + after.length) return value;
  return before + value + after;
}

function planRequest(r: RegistryResult): PlanRequest {
  if (r.sources.includes('official')) return { name: r.name, registry: 'official' };
  return { name: r.qualified_name || r.name, registry: 'smithery' };
}

/** Splits a command line on spaces, honouring simple quotes. */
function words(s: string): string[] {
  const out: string[] = [];
  const re = /"([^"]*)"|'([^']*)'|(\S+)/g;
  let m: RegExpExecArray | null;
  while ((m = re.exec(s))) out.push(m[1] ?? m[2] ?? m[3]);
  return out;
}

/** parseSource turns a pasted npx command, docker image/command or URL into a draft config. */
export function parseSource(text: string): McpConfig | null {
  const t = text.trim();
  if (/^https?:\/\//i.test(t)) {
    let name = 'server';
    try {
      name = new URL(t).hostname.split('.').filter((p) => p !== 'www' && p !== 'mcp')[0] || 'server';
    } catch {
      /* the server validates the URL */
    }
    return { name, enabled: false, package: { type: 'http', identifier: t }, transport: { type: 'http', url: t } };
  }
  let w = words(t);
  if (!w.length) return null;
  let type = '';
  const runtimeArgs: string[] = [];
  if (w[0] === 'npx' || w[0] === 'npm' && w[1] === 'exec') {
    w = w.slice(w[0] === 'npx' ? 1 : 2);
    while (w.length && w[0].startsWith('-')) {
      const f = w.shift()!;
      if (f !== '-y' && f !== '--yes') runtimeArgs.push(f);
    }
    type = 'npm';
  } else if (w[0] === 'docker') {
    w = w.slice(1);
    if (w[0] === 'run') w = w.slice(1);
    // Flags before the image go to docker run (those the runner sets itself are dropped).
    while (w.length && w[0].startsWith('-')) {
      const f = w.shift()!;
      if (['-i', '-t', '-it', '--rm', '--interactive'].includes(f)) continue;
      runtimeArgs.push(f);
      if (!f.includes('=') && ['-e', '--env', '-v', '--volume', '--mount', '--network', '--name', '-p', '--user', '-u', '-w', '--workdir'].includes(f) && w.length) runtimeArgs.push(w.shift()!);
    }
    type = 'docker';
  } else if (w.length === 1 && !w[0].startsWith('@') && /[/:]/.test(w[0]) && /^[a-z0-9][a-z0-9._\-/:@]*$/i.test(w[0])) {
    type = 'docker'; // registry/image[:tag]
  } else if (/^(@[a-z0-9._-]+\/)?[a-z0-9._-]+(@[^\s]+)?$/i.test(w[0])) {
    type = 'npm';
  } else {
    return null;
  }
  const ident = w.shift();
  if (!ident) return null;
  const base = ident.replace(/^@[^/]+\//, '').replace(/@.*$/, '').replace(/:.*$/, '').split('/').pop() || 'server';
  const name = base.replace(/^(mcp-server-|server-)/, '').replace(/(-mcp|-mcp-server|-server)$/, '') || base;
  return {
    name,
    enabled: false,
    package: { type, identifier: ident, runtime_args: runtimeArgs.length ? runtimeArgs : undefined, args: w.length ? w : undefined },
    transport: { type: 'stdio' },
  };
}

interface ConfigureFrom {
  manual?: McpConfig;
  plan?: InstallPlan;
  req?: PlanRequest;
}

function renderConfigure(main: HTMLElement, signal: AbortSignal, from: ConfigureFrom): void {
  main.replaceChildren();
  const plan = from.plan;
  const draft: McpConfig = plan?.draft ? structuredClone(plan.draft) : from.manual ?? { name: plan?.title || plan?.name || '', enabled: false, transport: { type: 'stdio' } };
  const defaultName = draft.name || plan?.title || '';
  const title = plan?.title || defaultName || plan?.name || 'server';
  const fields: Record<string, Field> = {};
  const err = formError();

  fields.name = field('Name', h('input', { type: 'text', value: defaultName, autocomplete: 'off' }), undefined, 'name slug');

  // What runs: editable for a pasted source, a summary for a registry plan.
  const source: HTMLElement[] = [];
  let typeSel: HTMLSelectElement | null = null;
  // A registry plan's draft, shown whole before Save (runs.ts); shownKey is
  // what the user has seen, so a re-plan that changes it is shown again first.
  const runsBox = h('fieldset', { class: 'runs', tabindex: '-1' });
  let shownKey = '';
  const showRuns = (cfg: McpConfig | undefined, changed: boolean) => {
    if (!cfg) {
      clear(runsBox, h('legend', null, 'What will run'), h('p', { class: 'muted' }, 'Shown once the settings below are filled in: Save shows it before anything is saved.'));
      shownKey = '';
      return;
    }
    const items = whatRuns(cfg, plan?.credentials ?? []);
    shownKey = runKey(items);
    clear(runsBox, h('legend', null, 'What will run'),
      changed ? h('p', { class: 'notice', role: 'alert' }, 'With these settings the server runs as below: check it, then Save again.') : null,
      h('dl', null, items.map((i) => [h('dt', null, i.label), h('dd', null, h('code', null, i.text))])),
      h('p', { class: 'hint' }, 'From the registry entry, which anyone can publish: save only what you expect to run.'));
  };
  if (!plan) {
    const pkg = draft.package!;
    typeSel = h('select', null, h('option', { value: 'npm' }, 'npm package (npx)'), h('option', { value: 'docker' }, 'docker image'), h('option', { value: 'http' }, 'HTTP URL'));
    typeSel.value = pkg.type;
    fields.type = field('Type', typeSel, undefined, 'package.type transport.type transport');
    fields.ident = field(pkg.type === 'http' ? 'URL' : 'Package or image', h('input', { type: 'text', value: pkg.type === 'http' ? draft.transport.url ?? '' : pkg.identifier, autocomplete: 'off', spellcheck: 'false' }), undefined, 'package.identifier transport.url package');
    fields.args = field('Arguments', h('input', { type: 'text', value: (pkg.args ?? []).join(' '), autocomplete: 'off', spellcheck: 'false' }), 'Passed to the server after the package or image, separated by spaces.', 'package.args');
    const updType = () => {
      const http = typeSel!.value === 'http';
      (fields.ident.row.querySelector('label') as HTMLElement).textContent = http ? 'URL' : 'Package or image';
      fields.args.row.hidden = http;
      renderAuth();
    };
    typeSel.addEventListener('change', updType);
    source.push(fields.type.row, fields.ident.row, fields.args.row);
    queueMicrotask(updType);
  } else {
    const p = plan.package;
    // What will run, revealed (text.ts): a bidi override in a registry's
    // identifier could make another package read like a known one.
    source.push(h('p', { class: 'muted' }, reveal(`From the ${SOURCE_LABEL[plan.source] ?? plan.source} registry: ${plan.name}${plan.version ? ' ' + plan.version : ''} — runs as ${p.type} ${p.type === 'http' ? p.url ?? p.identifier : p.identifier}${p.version && p.type !== 'http' && !p.identifier.endsWith(p.version) ? ' ' + p.version : ''}.`)));
    for (const w of plan.warnings ?? []) source.push(h('p', { class: 'notice' }, reveal(w)));
    showRuns(plan.draft, false);
    source.push(runsBox);
  }

  // Authentication (seeds §1.4–1.6).
  const auth = h('fieldset', { class: 'auth' });
  let mode: 'none' | 'key' | 'keyfile' = 'none';
  const credFields: { cred: PlanCredential; key: Field; file?: Field }[] = [];
  let manualKey: { name: Field; value: Field; file: Field } | null = null;
  const radio = (label: string, value: typeof mode, group: string, checked: boolean, onPick: () => void) => {
    const id = uid('auth');
    const r = h('input', { type: 'radio', name: group, id, value, checked });
    r.addEventListener('change', () => { if (r.checked) onPick(); });
    return h('div', { class: 'check' }, r, h('label', { for: id }, label));
  };
  const renderAuth = () => {
    const group = uid('authg');
    if (plan) {
      const creds = (plan.credentials ?? []).filter((c) => c.kind !== 'config');
      const urlCreds = (plan.credentials ?? []).filter((c) => c.kind === 'config');
      const header = plan.auth_type === 'oauth' ? 'This MCP requires OAuth authentication.' : creds.length ? 'This MCP requires authentication.' : 'No authentication required.';
      const keyBox = h('div', { class: 'indent' });
      const fileBox = h('div', { class: 'indent' });
      credFields.length = 0;
      for (const c of creds) {
        const form = c.template ? ` — sent as ${c.template}` : '';
        const kf = field(c.name + (c.required ? '' : ' (optional)'), h('input', { type: 'password', autocomplete: 'off', spellcheck: 'false' }), (c.description || (c.kind === 'header' ? 'HTTP header' : 'Environment variable')) + form, `secrets.${c.kind === 'header' ? 'headers' : 'env'}.${c.name} env_vars.${c.name} ${c.name}`);
        if (c.required) kf.input.setAttribute('aria-required', 'true');
        keyBox.append(kf.row);
        let ff: Field | undefined;
        if (c.kind === 'env') {
          ff = field(c.name + ' keyfile path', h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false' }), 'A file on the runner host holding the value (read at start), e.g. ~/.token', `secrets.keyfiles.${c.name} keyfiles.${c.name}`);
          fileBox.append(ff.row);
        }
        credFields.push({ cred: c, key: kf, file: ff });
      }
      const hasFile = creds.some((c) => c.kind === 'env') && creds.every((c) => c.kind === 'env');
      const children: (HTMLElement | null)[] = [h('legend', null, 'Authentication'), h('p', null, header)];
      if (creds.length) {
        mode = 'key';
        const setMode = (m: typeof mode) => {
          mode = m;
          keyBox.hidden = m !== 'key';
          fileBox.hidden = m !== 'keyfile';
        };
        if (hasFile) {
          children.push(radio('API Key / PAT', 'key', group, true, () => setMode('key')), keyBox, radio('Keyfile Path', 'keyfile', group, false, () => setMode('keyfile')), fileBox);
        } else children.push(keyBox);
        setMode('key');
      } else mode = 'none';
      if (plan.auth_type === 'oauth') children.push(h('p', { class: 'hint' }, 'The console cannot run the OAuth authorization: enter the values above, or authorize with the mcpbus CLI after saving.'));
      if (urlCreds.length) children.push(h('p', { class: 'notice' }, `${urlCreds.map((c) => c.name).join(', ')}: secrets this server reads from its URL; mcpbus does not put secrets in URLs.`));
      clear(auth, children);
      return;
    }
    // A pasted source: the user says which auth it needs.
    const http = typeSel?.value === 'http';
    const name = field(http ? 'Header name' : 'Environment variable', h('input', { type: 'text', value: http ? 'Authorization' : 'API_KEY', autocomplete: 'off', spellcheck: 'false' }), undefined, 'secrets.name');
    const value = field('API Key / PAT', h('input', { type: 'password', autocomplete: 'off' }), http ? 'The header value, e.g. Bearer <token>.' : undefined, 'secrets.env secrets.headers secrets');
    const file = field('Keyfile Path', h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false' }), '(e.g. ~/.github_token)', 'secrets.keyfiles keyfiles');
    manualKey = { name, value, file };
    Object.assign(fields, { credName: name, credValue: value, credFile: file });
    const nameBox = h('div', { class: 'indent' }, name.row);
    const setMode = (m: typeof mode) => {
      mode = m;
      nameBox.hidden = m === 'none';
      value.row.hidden = m !== 'key';
      file.row.hidden = m !== 'keyfile';
    };
    const opts = [radio('No authentication required', 'none', group, true, () => setMode('none')), radio('API Key / PAT', 'key', group, false, () => setMode('key'))];
    if (!http) opts.push(radio('Keyfile Path', 'keyfile', group, false, () => setMode('keyfile')));
    clear(auth, h('legend', null, 'Authentication'), opts, nameBox, h('div', { class: 'indent' }, value.row, file.row));
    setMode('none');
  };
  renderAuth();

  // Custom settings: the plan's non-secret inputs (§1.7).
  const inputFields: { input: PlanInput; f: Field }[] = [];
  const settings: HTMLElement[] = [];
  for (const inp of plan?.inputs ?? []) {
    let el: HTMLInputElement | HTMLSelectElement;
    if (inp.choices?.length) {
      el = h('select', null, inp.required ? null : h('option', { value: '' }, '(none)'), inp.choices.map((c) => h('option', { value: c }, c)));
      el.value = inp.value ?? inp.default ?? '';
    } else {
      el = h('input', { type: inp.format === 'number' ? 'number' : 'text', value: inp.value ?? inp.default ?? '', autocomplete: 'off', spellcheck: 'false' });
    }
    const f = field(inp.name + (inp.required ? '' : ' (optional)'), el, inp.description || `${inp.kind}`, `inputs.${inp.name} ${inp.name}`);
    // Required is required whether or not the plan has a value (a default) for it.
    if (inp.required || plan?.missing?.includes(inp.name)) f.input.setAttribute('aria-required', 'true');
    inputFields.push({ input: inp, f });
    fields['in:' + inp.name] = f;
    settings.push(f.row);
  }

  const enable = h('input', { type: 'checkbox', id: uid('en'), checked: false });
  const cancel = h('button', { type: 'button', class: 'btn' }, 'Cancel');
  const save = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Save');
  cancel.addEventListener('click', () => renderChoose(main, signal));
  const form = h('form', { class: 'card configure', novalidate: true, 'aria-labelledby': 'cfg-title' },
    fields.name.row, source, auth,
    settings.length ? h('fieldset', null, h('legend', null, 'Settings'), settings) : null,
    h('div', { class: 'check' }, enable, h('label', { for: enable.id }, 'Enable it now')),
    err, h('div', { class: 'actions' }, cancel, save));
  const heading = pageHeading(`Configure: ${title}`);
  heading.id = 'cfg-title';
  main.append(h('p', null, h('a', { href: '#/add', class: 'back' }, '‹ Add MCP')), heading, form);
  const back = main.querySelector('a.back') as HTMLAnchorElement;
  back.addEventListener('click', (e) => { e.preventDefault(); renderChoose(main, signal); });
  heading.focus();

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    Object.values(fields).forEach((f) => setFieldError(f, null));
    showError(err, null);
    save.disabled = true;
    try {
      let cfg: McpConfig;
      if (plan) {
        let p = plan;
        // Re-plan with the values typed in the settings: the draft follows them.
        if (inputFields.length || !plan.draft) {
          const variables: Record<string, string> = {};
          for (const { input, f } of inputFields) if (f.input.value.trim()) variables[input.name] = f.input.value.trim();
          // The version shown, not whatever is newest by now.
          p = await api<InstallPlan>('POST', '/api/v1/registry/plan', { ...from.req!, version: plan.version || from.req!.version, variables }, { signal });
          if (p.missing?.length) {
            let first: Field | undefined;
            for (const m of p.missing) {
              const f = fields['in:' + m];
              if (f) {
                setFieldError(f, `${m} is required.`);
                first ??= f;
              }
            }
            if (first) first.input.focus();
            else showError(err, `Missing values: ${p.missing.join(', ')}`);
            return;
          }
        }
        if (!p.draft) {
          showError(err, 'The registry entry has nothing this host can run.');
          return;
        }
        if (runKey(whatRuns(p.draft, p.credentials ?? [])) !== shownKey) {
          // The settings changed what runs (or the first plan had no draft):
          // nothing is saved before the user has seen it.
          showRuns(p.draft, true);
          runsBox.focus();
          return;
        }
        cfg = structuredClone(p.draft);
      } else {
        cfg = structuredClone(draft);
        const type = typeSel!.value;
        const ident = fields.ident.input.value.trim();
        const args = words(fields.args.input.value);
        if (type === 'http') {
          cfg.package = { type: 'http', identifier: ident };
          cfg.transport = { type: 'http', url: ident };
        } else {
          cfg.package = { ...(cfg.package ?? { type, identifier: ident }), type, identifier: ident, args: args.length ? args : undefined };
          if (type !== 'npm' && type !== 'docker') delete cfg.package.runtime_args;
          cfg.transport = { type: 'stdio' };
        }
      }
      const name = fields.name.input.value.trim();
      if (name !== (plan ? p_name(plan) : draft.name)) {
        cfg.name = name;
        delete cfg.slug;
      }
      cfg.enabled = enable.checked;
      const secrets: { env?: Record<string, string>; headers?: Record<string, string>; keyfiles?: Record<string, string> } = {};
      const put = (k: 'env' | 'headers' | 'keyfiles', n: string, v: string) => {
        (secrets[k] ??= {})[n] = v;
      };
      if (plan) {
        for (const { cred, key, file } of credFields) {
          if (mode === 'keyfile' && file) {
            if (file.input.value.trim()) put('keyfiles', cred.name, file.input.value.trim());
          } else if (key.input.value) put(cred.kind === 'header' ? 'headers' : 'env', cred.name, fillTemplate(cred.template, key.input.value));
        }
        if (mode === 'keyfile') cfg.auth_type = 'keyfile';
      } else if (manualKey && mode !== 'none') {
        const n = manualKey.name.input.value.trim();
        const http = cfg.transport.type === 'http';
        if (mode === 'key') put(http ? 'headers' : 'env', n, manualKey.value.input.value);
        else put('keyfiles', n, manualKey.file.input.value.trim());
        cfg.auth_type = mode === 'key' ? 'api_key' : 'keyfile';
        if (http) cfg.transport.secret_headers = [...new Set([...(cfg.transport.secret_headers ?? []), n])];
        else cfg.env_vars = { ...(cfg.env_vars ?? {}), [n]: mode === 'key' ? { is_secret: true, required: true } : { required: true, is_secret: true } };
      }
      const body: { config: McpConfig; secrets?: typeof secrets } = { config: cfg };
      if (Object.keys(secrets).length) body.secrets = secrets;
      const out = await api<McpConfig>('POST', '/api/v1/servers', body, { signal });
      setServer(out);
      toast(`Saved ${out.name}.`);
      lastQuery = { url: '', registry: lastQuery.registry, q: '' };
      location.hash = '#/servers';
    } catch (e) {
      if ((e as Error).name === 'AbortError' || (e instanceof ApiError && e.status === 401)) return;
      const ae = e as ApiError;
      const f = matchField(fields, ae.field) ?? (ae.field ? matchField(fields, ae.field.replace(/^secrets\.\w+\./, '')) : undefined);
      if (f && !f.row.hidden) {
        setFieldError(f, ae.message);
        f.input.focus();
      } else {
        showError(err, ae.message);
      }
    } finally {
      save.disabled = false;
    }
  });
}

function p_name(plan: InstallPlan): string {
  return plan.draft?.name || plan.title || '';
}
