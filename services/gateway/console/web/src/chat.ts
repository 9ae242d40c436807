// Chat: conversations with a profile, streamed text from the conversation's
// events, tool calls as in seeds/002 §11.2 (spinner, ✓, ✗, timed out) and
// approvals and the servers' requests for input (forms, chatinput.ts)
// answered inline.
import { api, ApiError, enc, follow } from './api';
import { answeredText, type ChatInput, inputCard, settle } from './chatinput';
import { clear, field, formError, h, pageHeading, showError, toolLabel, uid } from './dom';
import { isAdmin } from './store';
import { reveal } from './text';

interface ToolCall {
  call_id: string;
  tool: string;
  state: string;
  arguments?: unknown;
  summary?: string;
  duration_ms?: number;
}
interface ChatEvent {
  kind: string;
  conversation: string;
  turn: string; // absent on deleted
  text?: string;
  tool_call?: ToolCall;
  error?: { code: string; message: string };
  done?: { reason: string; message?: string; steps: number };
  input?: ChatInput;
}
interface Entry {
  seq: number;
  kind: string;
  turn: string;
  payload?: Record<string, unknown>;
}
interface Conversation {
  conversation: string;
  entries: number;
  last_activity: string;
  // owner: the principal it belongs to (a user's list has only their own).
  owner?: string;
}

function newID(): string {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = [...b].map((v) => v.toString(16).padStart(2, '0')).join('');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

// The profile last used, for this tab.
const PROFILE_KEY = 'mcpbus.console.profile';
let lastProfile = sessionStorage.getItem(PROFILE_KEY) ?? '';
function remember(p: string): void {
  lastProfile = p;
  sessionStorage.setItem(PROFILE_KEY, p);
}

export function chatPage(main: HTMLElement): () => void {
  const page = new AbortController();
  let stream: AbortController | null = null;
  let conv: string | null = null;
  let running = false;

  // Profile: a list for admin keys, a name to type otherwise.
  let profileEl: HTMLInputElement | HTMLSelectElement = h('input', { type: 'text', value: lastProfile, autocomplete: 'off', spellcheck: 'false' });
  const profileBox = h('div');
  const profileF = () => field('Profile', profileEl, isAdmin() ? undefined : 'The chat profile to talk to (ask your operator).');
  clear(profileBox, profileF().row);
  if (isAdmin()) {
    api<{ profiles: { name: string; model: string; provider: string }[] }>('GET', '/api/v1/chat/profiles', undefined, { signal: page.signal })
      .then((r) => {
        if (!r.profiles?.length) return;
        const sel = h('select', null, r.profiles.map((p) => h('option', { value: p.name }, `${p.name} (${p.provider} ${p.model})`)));
        if (lastProfile && r.profiles.some((p) => p.name === lastProfile)) sel.value = lastProfile;
        sel.addEventListener('change', () => remember(sel.value));
        remember(sel.value);
        profileEl = sel;
        clear(profileBox, profileF().row);
      })
      .catch(() => {});
  }
  profileEl.addEventListener('input', () => remember(profileEl.value.trim()));

  const newBtn = h('button', { type: 'button', class: 'btn' }, 'New conversation');
  const convList = h('ul', { class: 'convs', 'aria-label': 'Conversations' });
  const log = h('div', { class: 'chat-log', role: 'log', 'aria-live': 'polite', 'aria-label': 'Messages', tabindex: '0' });
  // Shown while an approval or a form waits and the log holds still (see
  // change), in a slot of its own under the log: over the log it could
  // cover a card's buttons, and showing it must not move them either.
  const more = h('button', { type: 'button', class: 'btn btn-small chat-more', hidden: true }, 'New messages below');
  const convTitle = h('h2', { class: 'conv-title' }, 'New conversation');
  const msg = h('textarea', { rows: '3', placeholder: 'Ask something…' });
  const msgF = field('Message', msg, 'Enter sends; Shift+Enter adds a line.');
  const err = formError();
  const send = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Send');
  const cancel = h('button', { type: 'button', class: 'btn', disabled: true }, 'Cancel turn');
  const form = h('form', { class: 'composer', novalidate: true, 'aria-label': 'Send a message' }, msgF.row, err, h('div', { class: 'actions' }, cancel, send));

  main.append(pageHeading('Chat'), h('div', { class: 'chat' },
    h('aside', { class: 'chat-side', 'aria-label': 'Chat settings' }, profileBox, newBtn, h('h2', { class: 'small-h' }, 'Conversations'), convList),
    h('section', { class: 'chat-main', 'aria-labelledby': 'conv-title' }, convTitle, log, h('div', { class: 'chat-more-slot' }, more), form)));
  convTitle.id = 'conv-title';

  const setRunning = (r: boolean) => {
    running = r;
    cancel.disabled = !r;
    send.setAttribute('aria-disabled', String(r));
  };

  // Rendering of one conversation.
  const bubbles = new Map<string, HTMLElement>(); // turn → the assistant text being streamed
  const cards = new Map<string, HTMLElement>();
  const scroll = () => {
    log.scrollTop = log.scrollHeight;
    more.hidden = true;
  };
  // The log follows what arrives (scrolled to its end) unless a card waits
  // for a click: an approval's buttons or a server's form. Then it holds
  // still, so that what arrives (the turn's other calls, one held too,
  // their ends, streamed text) cannot move the card under the pointer
  // between the aim and the click: the waiting card under the pointer (or
  // near it), else the first one in view, stays where it is on the screen
  // (the log scrolls by what moved above it), a card changed meanwhile
  // does not shrink (what is below it would move up), and "New messages
  // below" says there is more. Once nothing waits, the log follows again.
  let pointer: number | null = null; // the pointer's clientY over the log
  log.addEventListener('pointermove', (e) => { pointer = e.clientY; });
  log.addEventListener('pointerleave', () => { pointer = null; });
  log.addEventListener('scroll', () => {
    if (log.scrollHeight - log.scrollTop - log.clientHeight < 2) more.hidden = true;
  });
  more.addEventListener('click', () => { scroll(); log.focus(); });
  const waitingCards = () => [...log.children].filter((el) =>
    (el.classList.contains('tc-awaiting_approval') && el.querySelector(':scope > .actions')) ||
    (el.classList.contains('tc-input') && el.querySelector('form'))) as HTMLElement[];
  const NEAR = 48; // px: a pointer on its way to the card's buttons
  const anchorOf = (waiting: HTMLElement[]) => {
    if (pointer !== null) {
      const y = pointer;
      const hit = waiting.find((c) => { const r = c.getBoundingClientRect(); return y >= r.top - NEAR && y <= r.bottom + NEAR; });
      if (hit) return hit;
    }
    const view = log.getBoundingClientRect();
    return waiting.find((c) => { const r = c.getBoundingClientRect(); return r.bottom > view.top && r.top < view.bottom; }) ?? waiting[0];
  };
  let holding = false;
  const change = (fn: () => void) => {
    const waiting = waitingCards();
    const anchor = waiting.length ? anchorOf(waiting) : null;
    const top = anchor?.getBoundingClientRect().top ?? 0;
    holding = anchor !== null;
    fn();
    if (!anchor || !waitingCards().length) {
      // Nothing waits (any more): cards may shrink again, and the log follows.
      holding = false;
      for (const el of log.querySelectorAll<HTMLElement>('[data-held-height]')) {
        el.style.minHeight = '';
        delete el.dataset.heldHeight;
      }
      scroll();
      return;
    }
    log.scrollTop += anchor.getBoundingClientRect().top - top;
    if (log.scrollHeight - log.scrollTop - log.clientHeight >= 2) more.hidden = false;
  };
  // keepHeight: while the log holds still, el (changed in place) keeps at
  // least the height it had before.
  const keepHeight = (el: HTMLElement, before: number) => {
    if (!holding || !before) return;
    el.style.minHeight = `${Math.max(before, parseFloat(el.style.minHeight) || 0)}px`;
    el.dataset.heldHeight = '1';
  };
  const addUser = (text: string) => change(() => log.append(h('div', { class: 'msg msg-user' }, h('span', { class: 'sr-only' }, 'You: '), text)));
  const addText = (turn: string, text: string) => change(() => {
    let b = bubbles.get(turn);
    if (!b) {
      b = h('div', { class: 'msg msg-assistant' });
      log.append(b);
      bubbles.set(turn, b);
    }
    b.append(text);
  });
  const addNote = (text: string, cls = 'note') => change(() => log.append(h('div', { class: 'msg ' + cls }, text)));

  const argsBox = (args: unknown) => {
    let obj = args;
    if (typeof obj === 'string') {
      try { obj = JSON.parse(obj); } catch { /* shown as is */ }
    }
    if (obj && typeof obj === 'object' && !Array.isArray(obj)) {
      const entries = Object.entries(obj as Record<string, unknown>);
      if (!entries.length) return null;
      return h('div', { class: 'args' }, entries.map(([k, v]) => h('div', null, reveal(`${k}: ${JSON.stringify(v)}`))));
    }
    return obj === undefined || obj === null ? null : h('div', { class: 'args' }, reveal(String(typeof obj === 'string' ? obj : JSON.stringify(obj))));
  };

  const renderCall = (tc: ToolCall) => change(() => {
    let card = cards.get(tc.call_id);
    const before = card?.getBoundingClientRect().height ?? 0;
    if (!card) {
      card = h('div', { class: 'toolcall' });
      cards.set(tc.call_id, card);
      log.append(card);
    }
    const name = reveal(toolLabel(tc.tool));
    const prevArgs = (card as HTMLElement & { _args?: unknown })._args;
    const args = tc.arguments ?? prevArgs;
    (card as HTMLElement & { _args?: unknown })._args = args;
    const dur = tc.duration_ms ? ` (${Math.round(tc.duration_ms)} ms)` : '';
    card.className = 'toolcall tc-' + tc.state;
    switch (tc.state) {
      case 'started':
        clear(card, h('div', { class: 'tc-head' }, h('span', { class: 'spinner', 'aria-hidden': 'true' }), `Using ${name}...`), argsBox(args));
        break;
      case 'completed':
        clear(card, h('div', { class: 'tc-head' }, h('span', { class: 'ok', 'aria-hidden': 'true' }, '✓ '), `${name} completed${dur}`), tc.summary ? h('div', { class: 'tc-body' }, tc.summary) : null);
        break;
      case 'failed':
        clear(card, h('div', { class: 'tc-head' }, h('span', { class: 'bad', 'aria-hidden': 'true' }, '✗ '), `${name} failed${dur}`), h('div', { class: 'tc-body' }, tc.summary || 'The tool call failed.'));
        break;
      case 'timed_out':
        clear(card, h('div', { class: 'tc-head' }, h('span', { class: 'clock', 'aria-hidden': 'true' }, '⏱ '), `${name} timed out`), tc.summary ? h('div', { class: 'tc-body' }, tc.summary) : null);
        break;
      case 'awaiting_approval': {
        const btns = ([['approve', 'Approve'], ['deny', 'Deny'], ['approve_conversation', 'Approve for this conversation']] as const).map(([d, label]) => {
          const b = h('button', { type: 'button', class: d === 'deny' ? 'btn btn-small btn-danger-outline' : 'btn btn-small' }, label);
          b.addEventListener('click', () => void decide(tc, d, card!));
          return b;
        });
        const q = uid('ap');
        clear(card, h('div', { class: 'tc-head', id: q }, h('span', { class: 'clock', 'aria-hidden': 'true' }, '? '), `${name} needs your approval`), argsBox(args),
          h('div', { class: 'actions', role: 'group', 'aria-labelledby': q }, btns));
        break;
      }
      default:
        clear(card, h('div', { class: 'tc-head' }, `${name}: ${tc.state}`));
    }
    keepHeight(card, before);
    // A text after a tool call starts a new bubble.
    bubbles.clear();
  });

  // A server's request for input: its form, then what became of it.
  const inputs = new Map<string, HTMLElement>();
  // A form answered (here or elsewhere) gives way to a line: while
  // something else waits, its card keeps its height.
  const settleKept = (card: HTMLElement, text: string) => change(() => {
    const before = card.getBoundingClientRect().height;
    settle(card, text);
    keepHeight(card, before);
  });
  const renderInput = (in_: ChatInput) => {
    if (inputs.has(in_.input_id)) return;
    change(() => {
      const card = inputCard(() => conv, in_, settleKept);
      inputs.set(in_.input_id, card);
      log.append(card);
      bubbles.clear();
    });
  };
  const inputAnswered = (in_: ChatInput) => {
    const card = inputs.get(in_.input_id);
    if (card) settleKept(card, answeredText(in_));
    else addNote(`${toolLabel(in_.tool)} asked for input: ${answeredText(in_)}`);
  };

  const decide = async (tc: ToolCall, decision: string, card: HTMLElement) => {
    for (const b of card.querySelectorAll('button')) (b as HTMLButtonElement).disabled = true;
    try {
      await api('POST', `/api/v1/chat/conversations/${enc(conv!)}/approvals/${enc(tc.call_id)}`, { decision });
      // The buttons' box keeps its height: the cards below stay put.
      const box = card.querySelector<HTMLElement>(':scope > .actions');
      if (box) {
        change(() => {
          const note = h('p', { class: 'muted settled-note' }, decision === 'deny' ? 'Denied.' : 'Approved.');
          note.style.height = `${box.getBoundingClientRect().height}px`;
          box.replaceWith(note);
        });
      }
    } catch (e) {
      for (const b of card.querySelectorAll('button')) (b as HTMLButtonElement).disabled = false;
      if (!(e instanceof ApiError && e.status === 401)) card.append(h('p', { class: 'form-error', role: 'alert' }, (e as Error).message));
    }
  };

  const onEvent = (ev: ChatEvent) => {
    switch (ev.kind) {
      case 'text_delta':
        if (ev.text) addText(ev.turn, ev.text);
        setRunning(true);
        break;
      case 'tool_call':
        if (ev.tool_call) renderCall(ev.tool_call);
        setRunning(true);
        break;
      case 'input_requested':
        if (ev.input) renderInput(ev.input);
        break;
      case 'input_answered':
        if (ev.input) inputAnswered(ev.input);
        break;
      case 'error':
        if (ev.error) addNote(`Error: ${ev.error.message}`, 'msg-error');
        break;
      case 'done':
        setRunning(false);
        bubbles.delete(ev.turn);
        if (ev.done && ev.done.reason !== 'final') addNote(`Turn ended: ${ev.done.reason.replace(/_/g, ' ')}${ev.done.message ? ' — ' + ev.done.message : ''}`, ev.done.reason === 'cancelled' ? 'note' : 'msg-error');
        void loadList();
        break;
      case 'deleted':
        // The id may be someone else's next: follow it no more (following
        // again would claim it).
        stream?.abort();
        stream = null;
        setRunning(false);
        addNote('This conversation was deleted.');
        void loadList();
        break;
    }
  };

  // open follows the conversation's events; resolves once the stream is open
  // (so a message sent after it misses nothing), or after 5 s regardless.
  const open = (id: string) => {
    stream?.abort();
    const ctl = new AbortController();
    stream = ctl;
    page.signal.addEventListener('abort', () => ctl.abort());
    return new Promise<void>((resolve) => {
      const t = setTimeout(resolve, 5000);
      follow(`/api/v1/chat/conversations/${enc(id)}/events`, (e) => {
        try { onEvent(JSON.parse(e.data)); } catch { /* not an event */ }
      }, ctl.signal, () => { clearTimeout(t); resolve(); });
    });
  };

  const reset = () => {
    stream?.abort();
    stream = null;
    conv = null;
    bubbles.clear();
    cards.clear();
    inputs.clear();
    more.hidden = true;
    log.replaceChildren(h('p', { class: 'muted' }, 'Pick a profile and send a message to start a conversation.'));
    convTitle.textContent = 'New conversation';
    setRunning(false);
    markCurrent();
  };

  const select = async (id: string) => {
    reset();
    conv = id;
    convTitle.textContent = 'Conversation ' + id.slice(0, 8);
    markCurrent();
    log.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    try {
      const hist = await api<{ entries: Entry[] }>('GET', `/api/v1/chat/conversations/${enc(id)}`, undefined, { signal: page.signal });
      log.replaceChildren();
      let lastEnd = true;
      for (const e of hist.entries ?? []) {
        const p = (e.payload ?? {}) as Record<string, any>;
        lastEnd = e.kind === 'turn_end';
        if (e.kind === 'user_message' || e.kind === 'instructions') addUser(String(p.text ?? ''));
        else if (e.kind === 'model_step') {
          if (p.text) addText(e.turn + ':' + e.seq, String(p.text));
          for (const c of (p.tool_calls ?? []) as { id: string; name: string; arguments: string }[]) renderCall({ call_id: c.id, tool: c.name, state: 'started', arguments: c.arguments });
        } else if (e.kind === 'tool_result') {
          renderCall({ call_id: String(p.call_id), tool: String(p.tool), state: String(p.state), summary: String(p.content ?? '').slice(0, 500) });
        } else if (e.kind === 'turn_end' && p.reason && p.reason !== 'final') addNote(`Turn ended: ${String(p.reason).replace(/_/g, ' ')}${p.message ? ' — ' + p.message : ''}`);
      }
      setRunning(!lastEnd && (hist.entries ?? []).length > 0);
      const pend = await api<{ calls: ToolCall[]; inputs?: ChatInput[] }>('GET', `/api/v1/chat/conversations/${enc(id)}/pending`, undefined, { signal: page.signal });
      for (const c of pend.calls ?? []) renderCall(c);
      for (const i of pend.inputs ?? []) renderInput(i);
      await open(id);
    } catch (e) {
      if ((e as Error).name !== 'AbortError') addNote((e as Error).message, 'msg-error');
    }
  };

  const markCurrent = () => {
    for (const b of convList.querySelectorAll('button')) {
      if ((b as HTMLElement).dataset.id === conv) b.setAttribute('aria-current', 'true');
      else b.removeAttribute('aria-current');
    }
  };

  const loadList = async () => {
    try {
      const r = await api<{ conversations: Conversation[] }>('GET', '/api/v1/chat/conversations', undefined, { signal: page.signal });
      clear(convList, (r.conversations ?? []).map((c) => {
        const b = h('button', { type: 'button', class: 'conv', 'data-id': c.conversation },
          h('span', null, c.conversation.slice(0, 8)), h('span', { class: 'muted' }, ` ${new Date(c.last_activity).toLocaleString()}`));
        // An admin's list has everyone's conversations: say whose each is.
        if (isAdmin()) b.append(h('span', { class: 'owner muted', 'data-owner': c.owner ?? '' }, ` · ${c.owner || 'no owner'}`));
        b.addEventListener('click', () => void select(c.conversation));
        return h('li', null, b);
      }));
      if (!r.conversations?.length) convList.append(h('li', { class: 'muted' }, 'None yet.'));
      markCurrent();
    } catch {
      /* the list is a convenience */
    }
  };

  newBtn.addEventListener('click', () => { reset(); msg.focus(); });
  cancel.addEventListener('click', async () => {
    if (!conv) return;
    cancel.disabled = true;
    try {
      await api('POST', `/api/v1/chat/conversations/${enc(conv)}/cancel`, {});
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) showError(err, (e as Error).message);
      cancel.disabled = !running;
    }
  });
  msg.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    showError(err, null);
    const text = msg.value;
    const profile = profileEl.value.trim();
    if (running) {
      showError(err, 'Wait for the answer, or cancel the turn.');
      return;
    }
    if (!text.trim()) {
      showError(err, 'Type a message first.');
      msg.focus();
      return;
    }
    if (!conv && !profile) {
      showError(err, 'Choose a profile first.');
      profileEl.focus();
      return;
    }
    send.disabled = true;
    try {
      if (!conv) {
        const id = newID();
        conv = id;
        log.replaceChildren();
        convTitle.textContent = 'Conversation ' + id.slice(0, 8);
        await open(id);
        addUser(text);
        msg.value = '';
        setRunning(true);
        try {
          await api('POST', '/api/v1/chat/conversations', { conversation: id, profile, message: text });
        } catch (e) {
          // Nothing was started: back to a new conversation, the text kept.
          reset();
          msg.value = text;
          throw e;
        }
        void loadList();
      } else {
        addUser(text);
        msg.value = '';
        setRunning(true);
        await api('POST', `/api/v1/chat/conversations/${enc(conv)}/messages`, profile ? { message: text, profile } : { message: text });
      }
    } catch (e) {
      setRunning(false);
      if (!(e instanceof ApiError && e.status === 401)) showError(err, (e as Error).message);
    } finally {
      send.disabled = false;
    }
  });

  reset();
  void loadList();
  return () => {
    page.abort();
    stream?.abort();
  };
}
