// Tasks: the key's durable tool calls (/api/v1/tasks; an admin may list
// every principal's), filtered by state, with cancel and the result of a
// final one. A working task's progress (as its server reports it, recorded
// at most twice a second) and its end are pushed by its event stream
// (/api/v1/tasks/{id}/events); the list itself is reloaded every 5 s for
// tasks started elsewhere. Only a few streams are held at once: a browser
// has six connections per origin over HTTP/1.1, and the API needs some.
import { api, ApiError, enc, follow } from './api';
import { clear, confirmDialog, fmtTime, h, pageHeading, toast, toolLabel, uid } from './dom';
import { isAdmin } from './store';

export interface Task {
  id: string;
  state: string;
  message?: string;
  name: string;
  principal: string;
  attempts: number;
  created_at: string;
  updated_at: string;
  progress?: TaskProgress;
  result?: CallToolResult;
  error?: { code: string; message: string };
}

// TaskProgress is the last progress a task's server reported.
export interface TaskProgress {
  progress: number;
  total?: number;
  message?: string;
}

// progressText is a progress as the CLI shows it: "step 3 (3/10)", "3/10".
export function progressText(p: TaskProgress): string {
  const n = p.total ? `${p.progress}/${p.total}` : `${p.progress}`;
  return p.message ? `${p.message} (${n})` : n;
}

// progressCell shows a working task's progress: a bar when the total is
// known, and the text.
function progressCell(p: TaskProgress): HTMLElement {
  const text = progressText(p);
  return h('div', { class: 'task-progress' },
    p.total ? h('progress', { max: String(p.total), value: String(Math.min(p.progress, p.total)), 'aria-label': `Progress: ${text}` }) : null,
    h('span', null, text));
}

interface CallToolResult {
  content?: { type: string; text?: string; mimeType?: string; data?: string; resource?: { uri?: string; text?: string; mimeType?: string } }[];
  structuredContent?: unknown;
  isError?: boolean;
}

// maxStreams bounds the event streams of working tasks held at once.
const maxStreams = 3;

const STATES = ['working', 'completed', 'failed', 'cancelled'];

export function tasksPage(main: HTMLElement): () => void {
  const page = new AbortController();
  const streams = new Map<string, AbortController>();
  const stateSel = h('select', { id: uid('ts') }, h('option', { value: '' }, 'All'), STATES.map((s) => h('option', { value: s }, s[0].toUpperCase() + s.slice(1))));
  const allBox = h('input', { type: 'checkbox', id: uid('ta') });
  const status = h('p', { class: 'muted', 'aria-live': 'polite' });
  const body = h('tbody');
  const resultBox = h('section', { class: 'card task-result', 'aria-labelledby': 'task-result-h', hidden: true });
  main.append(pageHeading('Tasks'),
    h('p', { class: 'muted' }, 'Durable tool calls: they outlive their caller, and their outcome is kept for the retention. Start one with mcpbus tasks run or POST /api/v1/tasks.'),
    h('div', { class: 'task-filters' },
      h('div', { class: 'field' }, h('label', { for: stateSel.id }, 'State'), stateSel),
      isAdmin() ? h('div', { class: 'check' }, allBox, h('label', { for: allBox.id }, "Every principal's tasks")) : null),
    status,
    h('div', { class: 'table-wrap' }, h('table', null, h('caption', { class: 'sr-only' }, 'Tasks, newest first'),
      h('thead', null, h('tr', null, ['Tool', 'State', 'Started', 'Last change', 'Message', isAdmin() ? 'Principal' : '', ''].filter((c, i) => c || i === 6)
        .map((c) => h('th', { scope: 'col' }, c || h('span', { class: 'sr-only' }, 'Actions'))))), body)),
    resultBox);

  let tasks: Task[] = [];
  const stateBadge = (s: string) => h('span', { class: 'badge badge-task-' + s }, s);

  const showResult = async (t: Task) => {
    resultBox.hidden = false;
    clear(resultBox, h('h2', { id: 'task-result-h', tabindex: '-1' }, `Result of ${toolLabel(t.name)}`), h('p', { class: 'muted' }, 'Loading…'));
    try {
      const full = await api<Task>('GET', `/api/v1/tasks/${enc(t.id)}/result`, undefined, { signal: page.signal });
      clear(resultBox, h('h2', { id: 'task-result-h', tabindex: '-1' }, `Result of ${toolLabel(full.name)}`),
        h('p', { class: 'muted mono' }, `${full.id} · ${full.state}${full.attempts > 1 ? ` · ${full.attempts} attempts` : ''}`),
        renderOutcome(full));
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      clear(resultBox, h('h2', { id: 'task-result-h', tabindex: '-1' }, `Result of ${toolLabel(t.name)}`), h('p', { class: 'form-error', role: 'alert' }, (e as Error).message));
    }
    (resultBox.querySelector('h2') as HTMLElement | null)?.focus();
  };

  const cancelTask = async (t: Task) => {
    const ok = await confirmDialog({ title: `Cancel ${toolLabel(t.name)}?`, body: h('p', null, 'The call is stopped: its server is told to cancel it. A cancelled task keeps no result.'), confirm: 'Cancel task', danger: true });
    if (!ok) return;
    try {
      const got = await api<Task>('DELETE', `/api/v1/tasks/${enc(t.id)}`);
      toast(`Cancelled ${toolLabel(t.name)}.`);
      update(got);
    } catch (e) {
      if (e instanceof ApiError && e.status === 409) toast('The task had already ended.');
      else if (!(e instanceof ApiError && e.status === 401)) toast((e as Error).message, 'error');
      void load();
    }
  };

  const row = (t: Task) => {
    const acts: HTMLElement[] = [];
    if (t.state === 'working') {
      const b = h('button', { type: 'button', class: 'btn btn-small btn-danger-outline', 'aria-label': `Cancel ${toolLabel(t.name)} (${t.id})` }, 'Cancel');
      b.addEventListener('click', () => void cancelTask(t));
      acts.push(b);
    } else {
      const b = h('button', { type: 'button', class: 'btn btn-small', 'aria-label': `Show the result of ${toolLabel(t.name)} (${t.id})` }, 'Result');
      b.addEventListener('click', () => void showResult(t));
      acts.push(b);
    }
    return h('tr', { 'data-id': t.id, 'data-state': t.state },
      h('td', { class: 'mono' }, toolLabel(t.name)),
      h('td', null, stateBadge(t.state)),
      h('td', null, fmtTime(t.created_at)),
      h('td', null, fmtTime(t.updated_at)),
      h('td', null, t.state === 'working' && t.progress ? progressCell(t.progress) : (t.message ?? '')),
      isAdmin() ? h('td', { class: 'mono' }, t.principal) : null,
      h('td', null, h('div', { class: 'actions' }, acts)));
  };

  const render = () => {
    const want = stateSel.value;
    const shown = tasks.filter((t) => !want || t.state === want);
    clear(body, shown.length ? shown.map(row) : h('tr', null, h('td', { colspan: isAdmin() ? '7' : '6', class: 'muted' }, want ? `No ${want} task.` : 'No task yet.')));
    const n = (s: string) => tasks.filter((t) => t.state === s).length;
    status.textContent = STATES.map((s) => `${n(s)} ${s}`).join(', ');
    watchWorking();
  };

  // update puts a task's new state in the list (from a stream or a cancel).
  const update = (t: Task) => {
    const i = tasks.findIndex((x) => x.id === t.id);
    if (i < 0) return;
    tasks[i] = { ...tasks[i], ...t, result: undefined };
    render();
  };

  // watchWorking follows the newest working tasks' event streams (up to
  // maxStreams) and stops those of tasks no longer working or shown.
  const watchWorking = () => {
    const working = tasks.filter((t) => t.state === 'working').slice(0, maxStreams).map((t) => t.id);
    for (const [id, ctl] of streams) {
      if (!working.includes(id)) {
        ctl.abort();
        streams.delete(id);
      }
    }
    for (const id of working) {
      if (streams.has(id)) continue;
      const ctl = new AbortController();
      streams.set(id, ctl);
      follow(`/api/v1/tasks/${enc(id)}/events`, (e) => {
        try {
          update(JSON.parse(e.data) as Task);
        } catch { /* not a task */ }
      }, ctl.signal);
    }
  };

  const load = async () => {
    try {
      const q = isAdmin() && allBox.checked ? '?all=true' : '';
      const r = await api<{ tasks: Task[] }>('GET', '/api/v1/tasks' + q, undefined, { signal: page.signal });
      tasks = r.tasks ?? [];
      render();
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      clear(body, h('tr', null, h('td', { colspan: '7', class: 'form-error' }, (e as Error).message)));
    }
  };
  stateSel.addEventListener('change', render);
  allBox.addEventListener('change', () => void load());
  void load();
  const poll = setInterval(() => void load(), 5000);
  return () => {
    clearInterval(poll);
    page.abort();
    for (const ctl of streams.values()) ctl.abort();
  };
}

// renderOutcome shows a final task: its CallToolResult as the chat shows
// a tool's result (text as text, other content named), or why it has none.
export function renderOutcome(t: Task): HTMLElement {
  if (t.state !== 'completed' || !t.result) {
    return h('div', { class: 'tc-body task-error' }, t.error?.message || t.message || `The task ended ${t.state}.`);
  }
  const r = t.result;
  const parts: HTMLElement[] = [];
  for (const c of r.content ?? []) {
    if (c.type === 'text') parts.push(h('pre', { class: 'tc-body' }, c.text ?? ''));
    else if (c.type === 'resource' && c.resource) parts.push(h('pre', { class: 'tc-body' }, `[resource ${c.resource.uri ?? ''}]\n${c.resource.text ?? ''}`));
    else parts.push(h('p', { class: 'muted' }, `[${c.type} content${c.mimeType ? ', ' + c.mimeType : ''}, not shown]`));
  }
  if (r.structuredContent !== undefined) parts.push(h('pre', { class: 'tc-body', 'aria-label': 'Structured content' }, JSON.stringify(r.structuredContent, null, 2)));
  return h('div', { class: r.isError ? 'task-outcome task-error' : 'task-outcome' },
    r.isError ? h('p', null, h('span', { class: 'bad', 'aria-hidden': 'true' }, '✗ '), 'The tool reported an error.') : null,
    parts.length ? parts : h('p', { class: 'muted' }, 'The result has no content.'));
}
