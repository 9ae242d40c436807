// The console's shell: sign-in, navigation, hash routes.
import { api, ApiError, getKey, setKey, setUnauthorizedHandler, type Me } from './api';
import { clear, field, formError, h, pageHeading, showError, toastRegion } from './dom';
import { canCall, canChat, isAdmin, start, stopAll, store, subscribe } from './store';
import { serversPage } from './servers';
import { addPage } from './add';
import { activityPage } from './activity';
import { chatPage } from './chat';
import { keysPage } from './keys';
import { authorizationsPage } from './authorizations';
import { approvalsPage } from './approvals';
import { tasksPage } from './tasks';
import { auditPage } from './audit';

type Page = (main: HTMLElement) => (() => void) | void;

interface Route {
  path: string;
  label: string;
  page: Page;
  allowed: () => boolean;
}

const routes: Route[] = [
  { path: 'servers', label: 'Servers', page: serversPage, allowed: isAdmin },
  { path: 'add', label: 'Add server', page: addPage, allowed: isAdmin },
  { path: 'activity', label: 'Activity', page: activityPage, allowed: isAdmin },
  { path: 'chat', label: 'Chat', page: chatPage, allowed: canChat },
  { path: 'tasks', label: 'Tasks', page: tasksPage, allowed: canCall },
  { path: 'approvals', label: 'Approvals', page: approvalsPage, allowed: () => !!store.me },
  { path: 'keys', label: 'Keys and agents', page: keysPage, allowed: isAdmin },
  { path: 'audit', label: 'Audit', page: auditPage, allowed: isAdmin },
  { path: 'authorizations', label: 'My authorizations', page: authorizationsPage, allowed: () => true },
];

const root = document.getElementById('app')!;
let cleanup: (() => void) | void;
let mePoll = 0;
let main: HTMLElement | null = null;
let nav: HTMLElement | null = null;
let unsubLive: (() => void) | undefined;

function logout(message?: string): void {
  const wasIn = !!store.me;
  setKey(null);
  sessionStorage.clear(); // the key and everything kept with it (calls seen, profile)
  store.me = null;
  stopAll();
  clearInterval(mePoll);
  if (cleanup) cleanup();
  cleanup = undefined;
  if (wasIn || message) renderLogin(message);
}

setUnauthorizedHandler((msg) => {
  if (store.me) logout(msg);
});

function renderLogin(message?: string): void {
  main = null;
  const key = h('input', { type: 'password', name: 'key', autocomplete: 'off', spellcheck: 'false', required: true });
  const f = field('API key', key, 'An mcpbus API key (mcpbus_…). It is kept in this tab only.');
  const err = formError();
  const info = h('p', { class: 'notice', role: 'status' }, message ?? '');
  info.hidden = !message;
  const btn = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Sign in');
  const form = h('form', { class: 'login card', novalidate: true, 'aria-labelledby': 'login-title' },
    h('h1', { id: 'login-title' }, 'Sign in to mcpbus'), info, f.row, err, h('div', { class: 'actions' }, btn));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const v = key.value.trim();
    if (!v) {
      showError(err, 'Enter an API key.');
      key.focus();
      return;
    }
    btn.disabled = true;
    setKey(v);
    try {
      await signIn();
    } catch (e) {
      setKey(null);
      showError(err, e instanceof ApiError && e.status === 401 ? 'That key was not accepted.' : (e as Error).message);
      key.focus();
    } finally {
      btn.disabled = false;
    }
  });
  clear(root, toastRegion(), h('main', { id: 'main', class: 'login-wrap' }, form));
  document.title = 'Sign in · mcpbus console';
  key.focus();
}

async function signIn(): Promise<void> {
  const me = await api<Me>('GET', '/api/v1/me', undefined, { noLogout: true });
  store.me = me;
  start();
  clearInterval(mePoll);
  mePoll = window.setInterval(() => {
    api<Me>('GET', '/api/v1/me').then((m) => { store.me = m; }).catch(() => {});
  }, 30000);
  renderShell();
  if (!location.hash.startsWith('#/') || !findRoute()) {
    const first = routes.find((r) => r.allowed());
    location.hash = '#/' + (first ? first.path : 'servers');
  }
  route();
}

function findRoute(): Route | undefined {
  const p = location.hash.replace(/^#\//, '').split(/[/?]/)[0];
  return routes.find((r) => r.path === p);
}

function renderShell(): void {
  const me = store.me!;
  const links = routes.filter((r) => r.allowed()).map((r) => h('li', null, h('a', { href: '#/' + r.path, 'data-route': r.path }, r.label)));
  nav = h('nav', { 'aria-label': 'Main' }, h('ul', null, links));
  const live = h('span', { class: 'live', 'aria-live': 'off' });
  const updLive = () => {
    live.textContent = isAdmin() ? (store.live ? '● Live' : '○ Reconnecting…') : '';
    live.className = 'live ' + (store.live ? 'on' : 'off');
  };
  updLive();
  unsubLive?.();
  unsubLive = subscribe((w) => { if (w === 'live') updLive(); });
  const skip = h('a', { class: 'skip', href: '#/' }, 'Skip to content');
  skip.addEventListener('click', (e) => {
    e.preventDefault();
    (main?.querySelector('h1') as HTMLElement | null)?.focus();
  });
  const out = h('button', { type: 'button', class: 'btn btn-small' }, 'Sign out');
  out.addEventListener('click', () => logout('You signed out.'));
  main = h('main', { id: 'main' });
  clear(root, skip, toastRegion(),
    h('header', { class: 'top' },
      h('div', { class: 'brand' }, 'mcpbus'),
      nav,
      h('div', { class: 'who' }, live, h('span', { class: 'keyname', title: me.key_id }, me.name || me.key_id), out)),
    main);
  if (!routes.some((r) => r.allowed())) {
    clear(main, pageHeading('Nothing to show'), h('p', null, 'This key has none of the scopes the console uses (admin, call or chat).'));
  }
}

function route(): void {
  if (!store.me || !main) return;
  const r = findRoute();
  if (!r) return; // not a route (e.g. an in-page anchor)
  if (cleanup) cleanup();
  cleanup = undefined;
  for (const a of nav?.querySelectorAll('a') ?? []) {
    if ((a as HTMLElement).dataset.route === r.path) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  main.replaceChildren();
  document.title = r.label + ' · mcpbus console';
  if (!r.allowed()) {
    main.append(pageHeading(r.label), h('p', null, 'This page needs an admin key.'));
    return;
  }
  cleanup = r.page(main);
  (main.querySelector('h1') as HTMLElement | null)?.focus({ preventScroll: true });
}

window.addEventListener('hashchange', route);

if (getKey()) {
  signIn().catch((e) => {
    setKey(null);
    renderLogin(e instanceof ApiError && e.status === 401 ? 'Your key is no longer valid. Sign in again.' : (e as Error).message);
  });
} else {
  renderLogin();
}
