// My authorizations (any key): the servers with auth.per_principal, and
// whether this key holds credentials of its own for each — its own OAuth
// token (Authorize opens the provider's page) or header secrets (Save) —
// revocable here. Every call such a server gets from this key carries
// these, and no one else's (GET/POST/PUT/DELETE /api/v1/me/authorizations).
// The link an MCP client or the CLI shows for an authorization opens
// #/authorizations/continue/<server>/<flow>: signed in, this page continues
// it, which proves the key is the starter's and gives this browser the
// cookie the callback requires, then goes to the provider.
import { api, ApiError, enc, type OAuthContinueReply, type OAuthStartReply } from './api';
import { clear, confirmDialog, field, fmtTime, formError, h, pageHeading, showError, toast } from './dom';

interface Authorization {
  server: string;
  name: string;
  authorized: boolean;
  principal: string;
  secrets?: { headers?: string[]; oauth?: { expires_at?: string }; updated_at?: string };
}

// pollEvery and pollFor bound the wait for a started authorization.
const pollEvery = 2000;
const pollFor = 130_000;

// continueFlow continues the caller's own flow in this browser and returns
// the provider's URL (only http(s): it becomes a navigation).
async function continueFlow(server: string, flow: string, signal?: AbortSignal): Promise<string> {
  const out = await api<OAuthContinueReply>('POST', `/api/v1/me/authorizations/${enc(server)}/continue`, { flow }, { signal, withCookies: true });
  if (!/^https?:\/\//i.test(out.authorization_url)) throw new Error('The authorization server gave an address that is not a web page.');
  return out.authorization_url;
}

const continueRoute = /^#\/authorizations\/continue\/([^/]+)\/([0-9a-f]{64})$/;

export function authorizationsPage(main: HTMLElement): () => void {
  const ctl = new AbortController();
  const cont = continueRoute.exec(location.hash);
  if (cont) {
    let server = cont[1];
    try { server = decodeURIComponent(server); } catch { /* shown as given */ }
    const msg = h('p', { role: 'status' }, `Continuing your authorization of ${server}…`);
    main.append(pageHeading('My authorizations'), msg);
    continueFlow(server, cont[2], ctl.signal).then((u) => { location.assign(u); }).catch((e) => {
      if ((e as Error).name === 'AbortError') return;
      clear(msg, (e as Error).message + ' ', h('a', { href: '#/authorizations' }, 'Back to my authorizations'));
      msg.className = 'form-error';
    });
    return () => ctl.abort();
  }
  const list = h('div', { class: 'auth-list' });
  const status = h('p', { role: 'status', class: 'muted' });
  main.append(pageHeading('My authorizations'),
    h('p', null, 'Servers that take each caller\'s own credentials. Your calls to them carry only what you store here.'),
    status, list);

  const load = async (): Promise<Authorization[]> => {
    const r = await api<{ authorizations: Authorization[] }>('GET', '/api/v1/me/authorizations', undefined, { signal: ctl.signal });
    return r.authorizations ?? [];
  };
  const render = (items: Authorization[]) => {
    clear(list, items.length ? items.map((a) => card(a)) : h('p', { class: 'muted' }, 'No server takes per-user credentials.'));
  };
  const refresh = () => load().then(render).catch((e) => {
    if ((e as Error).name !== 'AbortError') clear(list, h('p', { class: 'form-error' }, (e as Error).message));
  });

  const card = (a: Authorization): HTMLElement => {
    const state = a.authorized
      ? (a.secrets?.oauth ? `Authorized (OAuth${a.secrets.oauth.expires_at ? ', token until ' + fmtTime(a.secrets.oauth.expires_at) : ''})` : `Authorized (headers: ${(a.secrets?.headers ?? []).join(', ')})`)
      : 'Not authorized: your calls are refused.';
    const authorize = h('button', { type: 'button', class: 'btn btn-small btn-primary', 'aria-label': `Authorize ${a.name}` }, 'Authorize');
    const revoke = h('button', { type: 'button', class: 'btn btn-small btn-danger-outline', 'aria-label': `Revoke ${a.name}`, hidden: !a.authorized }, 'Revoke');
    const note = h('p', { role: 'status', class: 'srv-auth', hidden: true });
    const hname = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'X-Api-Key' });
    const hval = h('input', { type: 'password', autocomplete: 'off' });
    const err = formError();
    const save = h('button', { type: 'submit', class: 'btn btn-small' }, 'Save header');
    const form = h('form', { novalidate: true, class: 'inline-form', 'aria-label': `Header secret for ${a.name}` },
      field('Header', hname).row, field('Value', hval).row, err, h('div', { class: 'actions' }, save));

    authorize.addEventListener('click', async () => {
      authorize.disabled = true;
      try {
        const out = await api<OAuthStartReply>('POST', `/api/v1/me/authorizations/${enc(a.server)}`);
        // The callback requires the cookie on the gateway's public origin:
        // continued here only when this page is on it, else its link (where
        // the user signs in) continues it.
        const here = out.flow && new URL(out.authorization_url).origin === location.origin;
        const u = here ? await continueFlow(a.server, out.flow!, ctl.signal) : out.authorization_url;
        window.open(u, '_blank', 'noopener');
        clear(note, 'Approve in the page that opened (', h('a', { href: u, target: '_blank', rel: 'noopener noreferrer' }, 'open it again'), ')…');
        note.hidden = false;
        const end = Date.now() + pollFor;
        while (Date.now() < end && !ctl.signal.aborted) {
          await new Promise((r) => setTimeout(r, pollEvery));
          const now = (await load()).find((x) => x.server === a.server);
          if (now?.secrets?.oauth && now.secrets.updated_at !== a.secrets?.updated_at) {
            toast(`Authorized ${a.name}.`);
            void refresh();
            return;
          }
        }
        if (!ctl.signal.aborted) clear(note, 'The authorization did not complete in time. Try again.');
      } catch (e) {
        if ((e as Error).name === 'AbortError') return;
        clear(note, (e as Error).message);
        note.hidden = false;
      } finally {
        authorize.disabled = false;
      }
    });
    revoke.addEventListener('click', async () => {
      const ok = await confirmDialog({ title: `Revoke your authorization of ${a.name}?`, body: h('p', null, 'Your calls to it are refused until you authorize again. Others are not affected.'), confirm: 'Revoke', danger: true });
      if (!ok) return;
      try {
        await api('DELETE', `/api/v1/me/authorizations/${enc(a.server)}`);
        toast(`Revoked your authorization of ${a.name}.`);
        void refresh();
      } catch (e) {
        if (!(e instanceof ApiError && e.status === 401)) toast((e as Error).message, 'error');
      }
    });
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      showError(err, null);
      if (!hname.value.trim() || !hval.value) {
        showError(err, 'Give the header\'s name and value.');
        return;
      }
      save.disabled = true;
      try {
        await api('PUT', `/api/v1/me/authorizations/${enc(a.server)}`, { headers: { [hname.value.trim()]: hval.value } });
        hval.value = '';
        toast(`Saved your header for ${a.name}.`);
        void refresh();
      } catch (e) {
        showError(err, (e as Error).message);
      } finally {
        save.disabled = false;
      }
    });
    return h('section', { class: 'card', 'aria-label': a.name, 'data-server': a.server },
      h('h2', null, a.name), h('p', { class: 'auth-state' }, state), note,
      h('div', { class: 'srv-actions' }, authorize, revoke), form);
  };

  status.textContent = 'Loading…';
  void refresh().finally(() => { status.textContent = ''; });
  return () => ctl.abort();
}
