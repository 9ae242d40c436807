// A tool call's server asking the user for input during a chat turn (an MCP
// form elicitation, the input_requested event): a form built from its
// requested schema, answered with Accept, Decline or Cancel. The chat
// service checks the answer against the schema; its field errors (field =
// the property) are shown at their fields.
import { api, ApiError, enc } from './api';
import { field, formError, h, setFieldError, showError, toolLabel, uid, type Field } from './dom';
import { reveal } from './text';

export interface ChatInput {
  input_id: string;
  call_id: string;
  tool: string;
  server: string;
  message: string;
  requested_schema?: { properties?: Record<string, Prop>; required?: string[] };
  action?: string;
  reason?: string;
}

interface Prop {
  type?: string;
  title?: string;
  description?: string;
  format?: string;
  enum?: string[];
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
}

const inputTypes: Record<string, string> = { email: 'email', uri: 'url', date: 'date', 'date-time': 'datetime-local' };

// One field of the form: its element and how to read its value.
interface FormField {
  name: string;
  f: Field;
  value: () => unknown; // undefined: left empty
}

function makeField(name: string, p: Prop, required: boolean): FormField {
  const label = (p.title || name) + (required ? ' *' : '');
  const hints: string[] = [];
  if (p.description) hints.push(p.description);
  if (p.minimum !== undefined || p.maximum !== undefined) hints.push(`From ${p.minimum ?? '…'} to ${p.maximum ?? '…'}.`);
  if (p.minLength !== undefined || p.maxLength !== undefined) hints.push(`${p.minLength ?? 0} to ${p.maxLength ?? '…'} characters.`);
  const hint = hints.join(' ') || undefined;
  let el: HTMLInputElement | HTMLSelectElement;
  let value: () => unknown;
  if (p.enum?.length) {
    const sel = h('select', null, h('option', { value: '' }, required ? 'Choose…' : '(none)'), p.enum.map((v) => h('option', { value: v }, v)));
    if (typeof p.default === 'string') sel.value = p.default;
    el = sel;
    value = () => sel.value || undefined;
  } else if (p.type === 'boolean') {
    const cb = h('input', { type: 'checkbox' });
    cb.checked = p.default === true;
    el = cb;
    value = () => cb.checked;
  } else if (p.type === 'number' || p.type === 'integer') {
    const n = h('input', { type: 'number', step: p.type === 'integer' ? '1' : 'any', inputmode: p.type === 'integer' ? 'numeric' : 'decimal' });
    if (p.minimum !== undefined) n.min = String(p.minimum);
    if (p.maximum !== undefined) n.max = String(p.maximum);
    if (typeof p.default === 'number') n.value = String(p.default);
    el = n;
    value = () => (n.value.trim() === '' ? undefined : Number(n.value));
  } else {
    const t = h('input', { type: inputTypes[p.format ?? ''] ?? 'text', autocomplete: 'off' });
    if (p.maxLength !== undefined) t.maxLength = p.maxLength;
    if (typeof p.default === 'string') t.value = p.default;
    el = t;
    value = () => {
      if (t.value === '') return undefined;
      // datetime-local has no zone: the schema's date-time wants RFC 3339.
      return p.format === 'date-time' ? new Date(t.value).toISOString() : t.value;
    };
  }
  if (required) el.setAttribute('aria-required', 'true');
  return { name, f: field(label, el, hint, name), value };
}

/**
 * inputCard renders a request for input of conversation conv as a form;
 * done settles it once answered here (the chat keeps the card's height
 * while an approval waits).
 */
export function inputCard(conv: () => string | null, in_: ChatInput, done: (card: HTMLElement, text: string) => void = settle): HTMLElement {
  const headId = uid('in');
  const props = in_.requested_schema?.properties ?? {};
  const required = new Set(in_.requested_schema?.required ?? []);
  const fields = Object.entries(props).map(([name, p]) => makeField(name, p, required.has(name)));
  const err = formError();
  const btn = (action: string, label: string, cls: string) => {
    const b = h('button', { type: action === 'accept' ? 'submit' : 'button', class: cls }, label);
    if (action !== 'accept') b.addEventListener('click', () => void answer(action));
    return b;
  };
  const actions = h('div', { class: 'actions' }, btn('cancel', 'Cancel', 'btn btn-small'), btn('decline', 'Decline', 'btn btn-small btn-danger-outline'), btn('accept', 'Accept', 'btn btn-small btn-primary'));
  const form = h('form', { class: 'input-form', novalidate: true, 'aria-labelledby': headId },
    fields.length ? h('p', { class: 'hint' }, 'Fields marked * are required.') : null,
    fields.map((x) => x.f.row), err, actions);
  const card = h('div', { class: 'toolcall tc-input', 'data-input': in_.input_id },
    h('div', { class: 'tc-head', id: headId }, h('span', { class: 'clock', 'aria-hidden': 'true' }, '? '),
      reveal(`${toolLabel(in_.tool)} asks: ${in_.message}`)),
    form);

  const busy = (on: boolean) => { for (const b of actions.querySelectorAll('button')) (b as HTMLButtonElement).disabled = on; };
  const answer = async (action: string) => {
    const id = conv();
    if (!id) return;
    showError(err, null);
    for (const x of fields) setFieldError(x.f, null);
    const body: { action: string; content?: Record<string, unknown> } = { action };
    if (action === 'accept') {
      body.content = {};
      for (const x of fields) {
        const v = x.value();
        if (v !== undefined) body.content[x.name] = v;
      }
    }
    busy(true);
    try {
      await api('POST', `/api/v1/chat/conversations/${enc(id)}/inputs/${enc(in_.input_id)}`, body);
      done(card, action === 'accept' ? 'Answered.' : action === 'decline' ? 'Declined.' : 'Cancelled.');
    } catch (e) {
      busy(false);
      if (e instanceof ApiError && e.status === 401) return;
      const at = e instanceof ApiError ? fields.find((x) => x.name === e.field) : undefined;
      if (at) {
        setFieldError(at.f, (e as Error).message);
        at.f.input.focus();
      } else showError(err, (e as Error).message);
    }
  };
  form.addEventListener('submit', (ev) => { ev.preventDefault(); void answer('accept'); });
  return card;
}

/** settle replaces the card's form with what became of the input. */
export function settle(card: HTMLElement, text: string): void {
  const form = card.querySelector('form');
  if (form) form.replaceWith(h('p', { class: 'muted' }, text));
  else card.querySelector('p.muted')!.textContent = text;
}

/** answeredText says how an input_answered event ended the input. */
export function answeredText(in_: ChatInput): string {
  const what = in_.action === 'accept' ? 'Answered.' : in_.action === 'decline' ? 'Declined.' : 'Cancelled.';
  return in_.reason ? `${what} ${in_.reason.charAt(0).toUpperCase()}${in_.reason.slice(1)}.` : what;
}
