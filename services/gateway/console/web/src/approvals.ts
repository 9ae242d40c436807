// Approvals: the tool calls the gateway's approval rules hold, for any MCP
// client, with approve and deny (admins, and the approvers a rule names: the
// gateway lists only the calls the key may decide). Polled every 2 s: a
// held call waits for a person, and the list is small.
import { api, ApiError, enc } from './api';
import { fmtTime, h, pageHeading, toast, toolLabel } from './dom';
import { reveal, revealJSON } from './text';

interface HeldCall {
  id: string;
  principal: string;
  tool: string;
  server?: string;
  server_tool?: string; // the server's own name of the tool, when the listed one differs
  arguments?: unknown;
  created_at: string;
  expires_at: string;
}

/**
 * argsText is what the approver reads of a held call's arguments: all of
 * them (a cut would let a long first argument push the one that matters out
 * of sight), indented, and revealed (text.ts).
 */
export function argsText(args: unknown): string {
  return revealJSON(args ?? {});
}

export function approvalsPage(main: HTMLElement): () => void {
  const ctl = new AbortController();
  const body = h('tbody');
  const status = h('p', { class: 'muted', 'aria-live': 'polite' });
  main.append(pageHeading('Approvals'),
    h('p', { class: 'muted' }, 'Tool calls held by the approval rules until someone decides; a call nobody decides in time is denied.'),
    status,
    h('div', { class: 'table-wrap' }, h('table', null, h('caption', { class: 'sr-only' }, 'Held tool calls, oldest first'),
      h('thead', null, h('tr', null, ['Tool', 'Caller', 'Arguments', 'Held since', 'Expires', ''].map((c) => h('th', { scope: 'col' }, c || h('span', { class: 'sr-only' }, 'Actions'))))), body)));

  // The rows stay where they are while the page is open: a call decided
  // here, decided elsewhere or expired keeps its row, its buttons replaced
  // by what became of it ("No longer held." when it was not decided here),
  // and a new call is added below. Were the row of a
  // call that went away removed, the rows under it would move up, and a
  // click aimed at one call could land on the next call's Approve.
  const rows = new Map<string, HTMLTableRowElement>();
  const none = h('tr', null, h('td', { colspan: '6', class: 'muted' }, 'No call is waiting for approval.'));
  const settle = (id: string, text: string) => {
    const tr = rows.get(id);
    const cell = tr?.querySelector<HTMLElement>('.actions');
    if (!tr || !cell || tr.classList.contains('settled')) return;
    tr.classList.add('settled');
    // The buttons' box keeps exactly its height (the text is short enough
    // to fit there), so the rows below stay put.
    cell.style.height = `${cell.getBoundingClientRect().height}px`;
    cell.replaceChildren(h('p', { class: 'muted settled-note' }, text));
  };
  // The calls being decided here: a poll that no longer lists one says
  // nothing of how (the decision's answer does).
  const deciding = new Set<string>();
  const decide = async (c: HeldCall, verb: 'approve' | 'deny') => {
    rows.get(c.id)?.querySelectorAll('button').forEach((b) => (b.disabled = true));
    deciding.add(c.id);
    try {
      await api('POST', `/api/v1/approvals/${enc(c.id)}/${verb}`);
      settle(c.id, verb === 'approve' ? 'Approved.' : 'Denied.');
      toast(`${verb === 'approve' ? 'Approved' : 'Denied'} ${toolLabel(c.tool)}.`);
    } catch (e) {
      rows.get(c.id)?.querySelectorAll('button').forEach((b) => (b.disabled = false));
      if (!(e instanceof ApiError && e.status === 401)) toast((e as Error).message, 'error');
    } finally {
      deciding.delete(c.id);
    }
    void load();
  };
  const row = (c: HeldCall) => {
    const yes = h('button', { type: 'button', class: 'btn btn-small btn-primary', 'aria-label': `Approve ${reveal(toolLabel(c.tool))} (${c.id})` }, 'Approve');
    const no = h('button', { type: 'button', class: 'btn btn-small btn-danger-outline', 'aria-label': `Deny ${reveal(toolLabel(c.tool))} (${c.id})` }, 'Deny');
    yes.addEventListener('click', () => void decide(c, 'approve'));
    no.addEventListener('click', () => void decide(c, 'deny'));
    return h('tr', { 'data-id': c.id },
      h('td', null, reveal(toolLabel(c.tool)), c.server_tool ? h('div', { class: 'muted' }, reveal(`${c.server ?? ''} calls it ${c.server_tool}`)) : null),
      h('td', { class: 'mono' }, c.principal),
      h('td', null, h('pre', { class: 'schema held-args', tabindex: '0', 'aria-label': 'Arguments' }, argsText(c.arguments))),
      h('td', null, fmtTime(c.created_at)),
      h('td', null, fmtTime(c.expires_at)),
      h('td', null, h('div', { class: 'actions' }, yes, no)));
  };
  const load = async () => {
    try {
      const r = await api<{ calls: HeldCall[] }>('GET', '/api/v1/approvals', undefined, { signal: ctl.signal });
      const list = r.calls ?? [];
      const held = new Set(list.map((c) => c.id));
      for (const id of rows.keys()) if (!held.has(id) && !deciding.has(id)) settle(id, 'No longer held.');
      for (const c of list) {
        if (rows.has(c.id)) continue;
        const tr = row(c);
        rows.set(c.id, tr);
        body.append(tr);
      }
      if (rows.size) none.remove();
      else body.append(none);
      status.className = 'muted';
      status.textContent = `${list.length} held`;
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      // The rows stay (see above): the error goes in the status line.
      status.className = 'form-error';
      status.textContent = (e as Error).message;
    }
  };
  void load();
  const poll = setInterval(() => void load(), 2000);
  return () => {
    clearInterval(poll);
    ctl.abort();
  };
}
