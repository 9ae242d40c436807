// Audit: the verification status of the tamper-evident audit trail (GET
// /api/v1/audit/verify, admins): each writer's chain, its records and last
// sequence, verified OK or its first fault named. Verified on opening and
// on demand, not polled: a verification reads the whole stream.
import { api, ApiError } from './api';
import { clear, fmtTime, h, pageHeading } from './dom';

interface Problem {
  stream_seq: number;
  chain: string;
  seq?: number;
  kind: string;
  detail: string;
}

interface Chain {
  chain: string;
  writer: string;
  role: string;
  records: number;
  first: number;
  last: number;
  last_stream_seq: number;
  ok: boolean;
  fault?: Problem;
}

interface VerifyReply {
  ok: boolean;
  from: number;
  from_start: boolean;
  records: number;
  events: number;
  next: number;
  chains: Chain[];
  problem_count: number;
  verified_at: string;
}

// crossPage is the fault of chain c whose page did not go on from record
// prev.last of the page before.
function crossPage(prev: Chain, c: Chain, r: VerifyReply): Problem {
  const kind = c.first > prev.last + 1 ? 'missing' : 'reordered';
  const detail = kind === 'missing'
    ? `records ${prev.last + 1} to ${c.first - 1} of the chain are not stored between stream sequences ${prev.last_stream_seq} and ${r.from}…`
    : `record ${c.first} stored after record ${prev.last} of its chain`;
  return { stream_seq: prev.last_stream_seq, chain: c.chain, seq: c.first, kind, detail };
}

export function auditPage(main: HTMLElement): () => void {
  const ctl = new AbortController();
  const body = h('tbody');
  const summary = h('p', { class: 'notice', role: 'status', 'aria-live': 'polite' }, 'Verifying…');
  const again = h('button', { type: 'button', class: 'btn btn-small' }, 'Verify again');
  main.append(pageHeading('Audit'),
    h('p', { class: 'muted' }, 'Every audited event is appended, hash-chained and signed by the service that wrote it, to one chain per writer. Verification checks each signature, each link and the order of every chain.'),
    h('div', { class: 'actions' }, again),
    summary,
    h('div', { class: 'table-wrap' }, h('table', { class: 'audit-chains' }, h('caption', { class: 'sr-only' }, 'Audit chains and their verification'),
      h('thead', null, h('tr', null, ['Writer', 'Role', 'Records', 'Last record', 'Last sequence', 'Verification'].map((c) => h('th', { scope: 'col' }, c)))), body)));

  const status = (c: Chain) => c.ok
    ? h('span', { class: 'badge badge-connected' }, 'Verified')
    : h('span', null, h('span', { class: 'badge badge-error' }, c.fault?.kind ?? 'broken'), ' ',
      h('span', { class: 'audit-fault' }, c.fault ? `at sequence ${c.fault.stream_seq} (record ${c.fault.seq ?? '?'}): ${c.fault.detail}` : ''));
  const row = (c: Chain) => h('tr', { 'data-chain': c.chain, 'data-ok': String(c.ok) },
    h('td', { class: 'mono', title: c.chain }, c.writer || 'unknown key'),
    h('td', null, c.role),
    h('td', null, String(c.records)),
    h('td', null, String(c.last)),
    h('td', null, String(c.last_stream_seq)),
    h('td', null, status(c)));

  const load = async () => {
    again.disabled = true;
    summary.textContent = 'Verifying…';
    try {
      // A long stream is verified in pages; the chains of the last page
      // are shown, and a fault of any page is reported.
      let from = 1;
      let records = 0;
      let faults = 0;
      let r: VerifyReply;
      const chains = new Map<string, Chain>();
      do {
        r = await api<VerifyReply>('GET', `/api/v1/audit/verify?from=${from}`, undefined, { signal: ctl.signal });
        records += r.records;
        faults += r.problem_count;
        for (const c of r.chains) {
          const prev = chains.get(c.chain);
          if (prev && prev.ok && c.ok && c.first !== prev.last + 1) {
            // Each page anchors a chain at its first record read, so a gap
            // (or a record out of order) just at a page's start showed as
            // verified: the pages are joined here by record number.
            faults++;
            chains.set(c.chain, { ...c, ok: false, fault: crossPage(prev, c, r) });
            continue;
          }
          chains.set(c.chain, prev && !prev.ok ? prev : c);
        }
        from = r.next;
      } while (from > 0);
      const list = [...chains.values()];
      clear(body, list.length ? list.map(row) : h('tr', null, h('td', { colspan: '6', class: 'muted' }, 'No audit record yet.')));
      summary.className = faults ? 'notice form-error' : 'notice';
      summary.textContent = faults
        ? `Broken: ${faults} problem${faults === 1 ? '' : 's'} in ${records} records of ${list.length} chains (verified ${fmtTime(r.verified_at)}).`
        : `Every link and signature holds: ${records} records of ${list.length} chains (verified ${fmtTime(r.verified_at)}).`;
    } catch (e) {
      if ((e as Error).name === 'AbortError') return;
      summary.className = 'notice form-error';
      summary.textContent = e instanceof ApiError && e.status === 403 ? 'Only admins may verify the audit trail.' : (e as Error).message;
    } finally {
      again.disabled = false;
    }
  };
  again.addEventListener('click', () => void load());
  void load();
  return () => ctl.abort();
}
