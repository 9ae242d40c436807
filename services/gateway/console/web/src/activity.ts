// Activity: the tool calls seen on the event stream (kind call), newest
// first, filterable, with the trace id and a Jaeger link when configured.
import { type CallEvent } from './api';
import { clear, field, fmtTime, h, pageHeading } from './dom';
import { MAX_CALLS, store, subscribe } from './store';

const OUTCOMES = ['ok', 'tool_error', 'error', 'timeout', 'cancelled'];

export function activityPage(main: HTMLElement): () => void {
  const server = h('select', null, h('option', { value: '' }, 'All servers'));
  const outcome = h('select', null, h('option', { value: '' }, 'All outcomes'), OUTCOMES.map((o) => h('option', { value: o }, o)));
  const text = h('input', { type: 'search', autocomplete: 'off', placeholder: 'tool, error, trace id…' });
  const fServer = field('Server', server);
  const fOutcome = field('Outcome', outcome);
  const fText = field('Text', text);
  const count = h('p', { class: 'muted', 'aria-live': 'polite' });
  const body = h('tbody');
  const table = h('table', { class: 'activity' },
    h('caption', { class: 'sr-only' }, 'Tool calls, newest first'),
    h('thead', null, h('tr', null, ['Time', 'Server', 'Tool', 'Duration', 'Outcome', 'Error', 'Trace'].map((c) => h('th', { scope: 'col' }, c)))),
    body);
  main.append(pageHeading('Activity'),
    h('p', { class: 'muted' }, `Tool calls seen since this console was opened (the last ${MAX_CALLS}), newest first.`),
    h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter calls', novalidate: true, onsubmit: (e: Event) => e.preventDefault() }, fServer.row, fOutcome.row, fText.row),
    count, h('div', { class: 'table-wrap' }, table));

  const servers = () => {
    const names = new Set<string>([...store.servers.map((s) => s.slug ?? s.name), ...store.calls.map((c) => c.server)]);
    const cur = server.value;
    clear(server, h('option', { value: '' }, 'All servers'), [...names].sort().map((n) => h('option', { value: n }, n)));
    server.value = names.has(cur) ? cur : '';
  };
  const match = (c: CallEvent) => {
    if (server.value && c.server !== server.value) return false;
    if (outcome.value && c.outcome !== outcome.value) return false;
    const q = text.value.trim().toLowerCase();
    if (q && ![c.server, c.tool, c.outcome, c.code, c.error, c.trace_id, c.request_id].some((v) => v && v.toLowerCase().includes(q))) return false;
    return true;
  };
  const row = (c: CallEvent) => {
    const jaeger = store.me?.jaeger_url?.replace(/\/+$/, '');
    const trace = c.trace_id
      ? jaeger
        ? h('a', { href: `${jaeger}/trace/${encodeURIComponent(c.trace_id)}`, target: '_blank', rel: 'noopener noreferrer', class: 'mono', title: 'Open the trace in Jaeger (new tab)' }, c.trace_id)
        : h('span', { class: 'mono' }, c.trace_id)
      : '';
    return h('tr', { class: 'outcome-' + c.outcome },
      h('td', null, fmtTime(c.at)),
      h('td', null, c.server),
      h('td', null, c.tool),
      h('td', { class: 'num' }, `${Math.round(c.duration_ms)} ms`),
      h('td', null, h('span', { class: 'badge badge-' + (c.outcome === 'ok' ? 'connected' : c.outcome === 'cancelled' ? 'idle' : 'error') }, c.outcome)),
      h('td', { class: 'err-cell' }, [c.code, c.error].filter(Boolean).join(': ')),
      h('td', null, trace));
  };
  const render = () => {
    const shown = store.calls.filter(match);
    clear(body, shown.length ? shown.map(row) : h('tr', null, h('td', { colspan: '7', class: 'muted' }, store.calls.length ? 'No call matches the filters.' : 'No calls yet: they appear here as they happen.')));
    count.textContent = `${shown.length} of ${store.calls.length} calls`;
  };
  for (const el of [server, outcome]) el.addEventListener('change', render);
  text.addEventListener('input', render);
  servers();
  render();
  const unsub = subscribe((w) => {
    if (w === 'calls') {
      servers();
      render();
    } else if (w === 'servers') servers();
  });
  return unsub;
}
