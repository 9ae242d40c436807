import { ApiError } from './api';

// A few DOM helpers: the console builds its pages with plain DOM calls (no
// framework, no innerHTML), which also keeps it within the strict CSP.

export type Child = Node | string | number | null | undefined | false | Child[];
type Props = Record<string, unknown>;

// Properties set as DOM properties rather than attributes.
const PROPS = new Set(['value', 'checked', 'disabled', 'hidden', 'selected', 'indeterminate', 'readOnly', 'required', 'multiple']);

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, props?: Props | null, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (v === undefined || v === null || v === false) {
        if (PROPS.has(k)) (el as unknown as Record<string, unknown>)[k] = false;
        continue;
      }
      if (k.startsWith('on') && typeof v === 'function') {
        el.addEventListener(k.slice(2).toLowerCase(), v as EventListener);
      } else if (PROPS.has(k)) {
        (el as unknown as Record<string, unknown>)[k] = v;
      } else if (k === 'class') {
        el.className = String(v);
      } else {
        el.setAttribute(k, v === true ? '' : String(v));
      }
    }
  }
  append(el, children);
  return el;
}

export function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
}

export function clear(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

let seq = 0;
/** A unique element id. */
export function uid(prefix = 'id'): string {
  seq++;
  return `${prefix}-${seq}`;
}

/** A labelled form field: the input, its label and a slot for its error. */
export interface Field {
  row: HTMLElement;
  input: HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;
  error: HTMLElement;
}

export function field(label: string, input: HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement, hint?: string, name?: string): Field {
  const id = input.id || uid('f');
  input.id = id;
  if (name) input.dataset.field = name;
  const err = h('p', { class: 'field-error', id: id + '-err', hidden: true });
  const desc: string[] = [err.id];
  let hintEl: HTMLElement | null = null;
  if (hint) {
    hintEl = h('p', { class: 'hint', id: id + '-hint' }, hint);
    desc.unshift(hintEl.id);
  }
  input.setAttribute('aria-describedby', desc.join(' '));
  const row = h('div', { class: 'field' }, h('label', { for: id }, label), input, hintEl, err);
  return { row, input, error: err };
}

export function setFieldError(f: Field, msg: string | null): void {
  if (msg) {
    f.error.textContent = msg;
    f.error.hidden = false;
    f.input.setAttribute('aria-invalid', 'true');
  } else {
    f.error.textContent = '';
    f.error.hidden = true;
    f.input.removeAttribute('aria-invalid');
  }
}

/** A general (form-level) error area. */
export function formError(): HTMLElement {
  return h('div', { class: 'form-error', role: 'alert', hidden: true });
}

export function showError(el: HTMLElement, msg: string | null): void {
  el.textContent = msg ?? '';
  el.hidden = !msg;
}

// Toasts: one polite live region for the whole app.
let toasts: HTMLElement | null = null;
export function toastRegion(): HTMLElement {
  toasts = h('div', { class: 'toasts', role: 'status', 'aria-live': 'polite' });
  return toasts;
}

export function toast(msg: string, kind: 'info' | 'error' = 'info'): void {
  if (!toasts) return;
  const t = h('div', { class: 'toast toast-' + kind }, msg);
  toasts.appendChild(t);
  setTimeout(() => t.remove(), kind === 'error' ? 8000 : 4000);
}

/**
 * A modal confirmation built on <dialog>: showModal makes the rest of the
 * page inert (the focus stays inside) and Escape cancels. Resolves true on
 * confirm.
 */
export function confirmDialog(opts: { title: string; body: Child; confirm: string; danger?: boolean }): Promise<boolean> {
  return new Promise((resolve) => {
    const titleId = uid('dlg');
    const bodyId = uid('dlgb');
    const cancel = h('button', { type: 'button', class: 'btn' }, 'Cancel');
    const ok = h('button', { type: 'button', class: opts.danger ? 'btn btn-danger' : 'btn btn-primary' }, opts.confirm);
    const dlg = h('dialog', { 'aria-labelledby': titleId, 'aria-describedby': bodyId, class: 'dialog' },
      h('h2', { id: titleId }, opts.title),
      h('div', { id: bodyId }, opts.body),
      h('div', { class: 'actions' }, cancel, ok));
    const opener = document.activeElement as HTMLElement | null;
    let result = false;
    cancel.addEventListener('click', () => dlg.close());
    ok.addEventListener('click', () => { result = true; dlg.close(); });
    dlg.addEventListener('close', () => {
      dlg.remove();
      opener?.focus?.();
      resolve(result);
    });
    document.body.appendChild(dlg);
    dlg.showModal();
    cancel.focus();
  });
}

export function fmtTime(t: string | undefined): string {
  if (!t) return '';
  const d = new Date(t);
  if (isNaN(d.getTime()) || d.getFullYear() < 2000) return '';
  return d.toLocaleString();
}

/** server__tool → server.tool (the seeds' display of a namespaced tool). */
export function toolLabel(name: string): string {
  const i = name.indexOf('__');
  return i > 0 ? name.slice(0, i) + '.' + name.slice(i + 2) : name;
}

export function pageHeading(text: string): HTMLHeadingElement {
  return h('h1', { tabindex: '-1', class: 'page-title' }, text);
}

/** matchField finds the form field an API error names (config.x → x; a parent path matches too). */
export function matchField(fields: Record<string, Field>, name: string | undefined): Field | undefined {
  if (!name) return undefined;
  let n = name.replace(/^config\./, '');
  const all = Object.values(fields);
  while (n) {
    const names = (x: Field) => (x.input.dataset.field ?? '').split(' ');
    const f = all.find((x) => names(x).includes(n)) ?? all.find((x) => names(x).some((m) => m.startsWith(n + '.')));
    if (f) return f;
    const i = n.lastIndexOf('.');
    n = i > 0 ? n.slice(0, i) : '';
  }
  return undefined;
}

/**
 * reportFormError shows a failed save: next to the field the API error names,
 * focusing it, else in the form's error area. A 401 shows nothing here: the
 * app signs out.
 */
export function reportFormError(e: unknown, fields: Record<string, Field>, area: HTMLElement): void {
  if (e instanceof ApiError && e.status === 401) return;
  const f = matchField(fields, (e as ApiError).field);
  if (f) {
    setFieldError(f, (e as Error).message);
    f.input.focus();
  } else showError(area, (e as Error).message);
}
