// Pending tool changes of one server (pinned tool definitions,
// docs/security.md): a tool whose definition changed since it was pinned is
// withheld until someone here approves the new definition or rejects it.
// Each change shows the pinned and the new value of every field that differs.
import { api, ApiError, enc } from './api';
import { h, toast } from './dom';
import { reveal, revealJSON } from './text';

type Definition = Record<string, unknown>;

export interface ToolPin {
  server: string;
  tool: string;
  hash: string;
  definition: Definition;
  pinned_at: string;
  pending?: { hash: string; definition: Definition; seen_at: string };
}

/** changedFields names the members that differ between two definitions. */
export function changedFields(a: Definition, b: Definition): string[] {
  const keys = new Set([...Object.keys(a ?? {}), ...Object.keys(b ?? {})]);
  return [...keys].filter((k) => JSON.stringify(a?.[k]) !== JSON.stringify(b?.[k])).sort();
}

// show is a field's value as the review reads it: revealed (text.ts), since
// a change made only of characters that do not show must not look like none.
const show = revealJSON;

/** pinDiff is what the review shows of a change: each differing field with its pinned and new value. */
export function pinDiff(c: ToolPin): { field: string; pinned: string; next: string }[] {
  const next = c.pending?.definition ?? {};
  return changedFields(c.definition, next).map((f) => ({ field: reveal(f), pinned: show(c.definition?.[f]), next: show(next[f]) }));
}

// keyOf names one pending change: a tool's new definition.
const keyOf = (c: ToolPin) => c.tool + '\n' + (c.pending?.hash ?? '');

export class PinsBox {
  el: HTMLElement;
  private server: () => { ref: string; name: string };
  private loading = false;
  private again = false;
  // The cards stay where they are while any change is undecided: one
  // decided (here or elsewhere) keeps its card, its buttons replaced by
  // what became of it, and a new change is added below. Rebuilt in the
  // API's order (by tool), a change the server makes while another is on
  // screen would move that one's Approve, and a click aimed at it could
  // approve the server's newest definition instead.
  private cards = new Map<string, HTMLElement>();
  private deciding = new Set<string>();
  private head = h('h3');
  private list = h('div');
  private err = h('p', { class: 'form-error', role: 'alert', hidden: true });

  constructor(server: () => { ref: string; name: string }) {
    this.server = server;
    this.el = h('section', { class: 'pins', hidden: true },
      this.head,
      h('p', { class: 'muted' }, 'These tools changed since they were pinned and are withheld from every client and the chat until approved.'),
      this.err, this.list);
  }

  /** load asks for the server's pending changes and shows them (nothing when none). */
  async load(): Promise<void> {
    if (this.loading) {
      this.again = true; // a change came in meanwhile: ask once more after
      return;
    }
    this.loading = true;
    const { ref } = this.server();
    try {
      const r = await api<{ changes: ToolPin[] }>('GET', `/api/v1/servers/${enc(ref)}/pins`);
      this.render(r.changes ?? []);
    } catch (e) {
      // A server not yet known to the runners has nothing to review.
      if (!(e instanceof ApiError && (e.status === 401 || e.status === 404))) this.render(null, (e as Error).message);
    } finally {
      this.loading = false;
      if (this.again) {
        this.again = false;
        void this.load();
      }
    }
  }

  // render shows changes (null: unknown, the cards stay as they are) and err.
  private render(changes: ToolPin[] | null, err?: string): void {
    const { name } = this.server();
    this.el.setAttribute('aria-label', `Tool changes of ${name}`);
    this.err.textContent = err ? `Tool changes: ${err}` : '';
    this.err.hidden = !err;
    if (changes) {
      const pending = changes.filter((c) => c.pending);
      const keys = new Set(pending.map(keyOf));
      for (const [k, card] of this.cards) if (!keys.has(k) && !this.deciding.has(k)) settle(card, 'No longer pending.');
      for (const c of pending) {
        const k = keyOf(c);
        if (this.cards.has(k)) continue;
        const card = this.change(c);
        this.cards.set(k, card);
        this.list.append(card);
      }
      // Nothing left to decide: the box goes.
      if (!this.undecided() && !this.deciding.size) {
        this.cards.clear();
        this.list.replaceChildren();
      }
    }
    this.head.textContent = `Tool changes awaiting review (${this.undecided()})`;
    this.el.hidden = !this.cards.size && !err;
  }

  private undecided(): number {
    return [...this.cards.values()].filter((c) => !c.classList.contains('settled')).length;
  }

  private change(c: ToolPin): HTMLElement {
    const approve = h('button', { type: 'button', class: 'btn btn-small btn-primary', 'aria-label': `Approve the new definition of ${reveal(c.tool)}` }, 'Approve');
    const reject = h('button', { type: 'button', class: 'btn btn-small btn-danger-outline', 'aria-label': `Reject the new definition of ${reveal(c.tool)}` }, 'Reject');
    approve.addEventListener('click', () => void this.decide(c, false, [approve, reject]));
    reject.addEventListener('click', () => void this.decide(c, true, [approve, reject]));
    return h('div', { class: 'pin-change card' },
      h('h4', null, reveal(c.tool)),
      h('div', { class: 'table-wrap' }, h('table', null,
        h('caption', { class: 'sr-only' }, `Changed fields of ${reveal(c.tool)}`),
        h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Field'), h('th', { scope: 'col' }, 'Pinned'), h('th', { scope: 'col' }, 'New'))),
        h('tbody', null, pinDiff(c).map((d) => h('tr', null,
          h('th', { scope: 'row' }, d.field),
          h('td', null, h('pre', { class: 'schema pin-old' }, d.pinned)),
          h('td', null, h('pre', { class: 'schema pin-new' }, d.next))))))),
      h('div', { class: 'actions' }, reject, approve));
  }

  private async decide(c: ToolPin, rejected: boolean, btns: HTMLButtonElement[]): Promise<void> {
    const k = keyOf(c);
    btns.forEach((b) => (b.disabled = true));
    this.deciding.add(k);
    try {
      await api('POST', `/api/v1/servers/${enc(this.server().ref)}/pins/approve`, { tool: c.tool, hash: c.pending!.hash, reject: rejected || undefined });
      const card = this.cards.get(k);
      if (card) settle(card, rejected ? 'Rejected.' : 'Approved.');
      toast(rejected ? `Rejected the new definition of ${reveal(c.tool)}.` : `Approved the new definition of ${reveal(c.tool)}.`);
    } catch (e) {
      btns.forEach((b) => (b.disabled = false));
      if (!(e instanceof ApiError && e.status === 401)) toast(`${reveal(c.tool)}: ${(e as Error).message}`, 'error');
    } finally {
      this.deciding.delete(k);
      void this.load();
    }
  }
}

// settle replaces a card's buttons with what became of its change, in a
// box of their exact height, so the cards below stay put.
function settle(card: HTMLElement, text: string): void {
  const actions = card.querySelector<HTMLElement>('.actions');
  if (!actions || card.classList.contains('settled')) return;
  card.classList.add('settled');
  actions.style.height = `${actions.getBoundingClientRect().height}px`;
  actions.replaceChildren(h('p', { class: 'muted settled-note' }, text));
}
