// Browser flows of the web console (issue 15), run by tests/console (Go)
// against a real `mcpbus up`: node tests/console/e2e/run.mjs.
// Environment: MCPBUS_URL, MCPBUS_ADMIN_KEY, MCPBUS_CHROMIUM, MCPBUS_ARTIFACTS,
// MCPBUS_SEARCH, MCPBUS_ENTRY, MCPBUS_SECRET_NAME, MCPBUS_SERVER_SLUG,
// MCPBUS_TOOL, MCPBUS_PROFILE, MCPBUS_CHAT_MESSAGE, MCPBUS_CHAT_REPLY,
// MCPBUS_SMITHERY_SEARCH, MCPBUS_SMITHERY_ENTRY, MCPBUS_CHAT_FAIL_PROMPT,
// MCPBUS_CHAT_FAIL_TOOL, MCPBUS_CHAT_FAIL_REPLY, MCPBUS_CHAT_TIMEOUT_PROMPT,
// MCPBUS_CHAT_TIMEOUT_TOOL, MCPBUS_CHAT_TIMEOUT_REPLY, MCPBUS_CHAT_TIMEOUT_DURATION,
// MCPBUS_CHAT_INPUT_PROMPT, MCPBUS_CHAT_INPUT_TOOL, MCPBUS_CHAT_INPUT_REPLY, MCPBUS_CHAT_CALL_TIMEOUT_MS,
// MCPBUS_CHAT_HOLD_PROFILE, MCPBUS_CHAT_HOLD_PROMPT, MCPBUS_CHAT_HOLD_REPLY,
// MCPBUS_OAUTH_SERVER, MCPBUS_OAUTH_NEW_SERVER, MCPBUS_PER_USER_SERVER,
// MCPBUS_CALL_KEY, MCPBUS_DRIFT_SERVER, MCPBUS_DRIFT_BEFORE, MCPBUS_DRIFT_AFTER, MCPBUS_DRIFT_ADD_URL,
// MCPBUS_TAMPER_URL (see the contract in the Go harness). Every page is also
// checked with axe-core (WCAG 2.1 A and AA). Exit 0 when every step passed;
// else 1, naming the step.
import { createRequire } from 'node:module';
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
// playwright-core is pinned in tests/npm (make npm-deps installs it).
const require = createRequire(resolve(here, '..', '..', 'npm', 'package.json'));
let chromium;
try {
  ({ chromium } = require('playwright-core'));
} catch (e) {
  console.error(`playwright-core is not installed in tests/npm (run make npm-deps): ${e.message}`);
  process.exit(2);
}
// axe-core, pinned there too: its source is evaluated in the page (see a11y).
let AXE_SOURCE;
try {
  AXE_SOURCE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
} catch (e) {
  console.error(`axe-core is not installed in tests/npm (run make npm-deps): ${e.message}`);
  process.exit(2);
}

function env(name, def) {
  const v = process.env[name] ?? def;
  if (v === undefined || v === '') {
    console.error(`missing environment variable ${name}`);
    process.exit(2);
  }
  return v;
}
const BASE = env('MCPBUS_URL').replace(/\/+$/, '');
const ORIGIN = new URL(BASE).origin;
const ADMIN_KEY = env('MCPBUS_ADMIN_KEY');
const CHROMIUM = env('MCPBUS_CHROMIUM', '/usr/bin/chromium');
const ARTIFACTS = env('MCPBUS_ARTIFACTS', join(process.cwd(), 'artifacts', 'console'));
const SEARCH = env('MCPBUS_SEARCH');
const ENTRY = env('MCPBUS_ENTRY');
const SECRET = env('MCPBUS_SECRET_NAME');
const SLUG = env('MCPBUS_SERVER_SLUG');
const TOOL = env('MCPBUS_TOOL');
const PROFILE = env('MCPBUS_PROFILE');
const MESSAGE = env('MCPBUS_CHAT_MESSAGE');
const REPLY = env('MCPBUS_CHAT_REPLY');
const SMITHERY_SEARCH = env('MCPBUS_SMITHERY_SEARCH');
const SMITHERY_ENTRY = env('MCPBUS_SMITHERY_ENTRY');
const FAIL_PROMPT = env('MCPBUS_CHAT_FAIL_PROMPT');
const FAIL_TOOL = env('MCPBUS_CHAT_FAIL_TOOL');
const FAIL_REPLY = env('MCPBUS_CHAT_FAIL_REPLY');
const TIMEOUT_PROMPT = env('MCPBUS_CHAT_TIMEOUT_PROMPT');
const TIMEOUT_TOOL = env('MCPBUS_CHAT_TIMEOUT_TOOL');
const TIMEOUT_REPLY = env('MCPBUS_CHAT_TIMEOUT_REPLY');
const TIMEOUT_DURATION = env('MCPBUS_CHAT_TIMEOUT_DURATION');
const INPUT_PROMPT = env('MCPBUS_CHAT_INPUT_PROMPT');
const INPUT_TOOL = env('MCPBUS_CHAT_INPUT_TOOL');
const INPUT_REPLY = env('MCPBUS_CHAT_INPUT_REPLY');
const CALL_TIMEOUT_MS = Number(env('MCPBUS_CHAT_CALL_TIMEOUT_MS'));
const HOLD_PROFILE = env('MCPBUS_CHAT_HOLD_PROFILE');
const HOLD_PROMPT = env('MCPBUS_CHAT_HOLD_PROMPT');
const HOLD_REPLY = env('MCPBUS_CHAT_HOLD_REPLY');
const OAUTH_SERVER = env('MCPBUS_OAUTH_SERVER');
const OAUTH_NEW = env('MCPBUS_OAUTH_NEW_SERVER');
const PER_USER = env('MCPBUS_PER_USER_SERVER');
const CALL_KEY = env('MCPBUS_CALL_KEY');
const DRIFT = env('MCPBUS_DRIFT_SERVER');
const DRIFT_BEFORE = env('MCPBUS_DRIFT_BEFORE');
const DRIFT_AFTER = env('MCPBUS_DRIFT_AFTER');
const DRIFT_ADD_URL = env('MCPBUS_DRIFT_ADD_URL');
const TAMPER_URL = env('MCPBUS_TAMPER_URL');
mkdirSync(ARTIFACTS, { recursive: true });

const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const T = { short: 15_000, start: 120_000, chat: 60_000, logout: 45_000 };

// Problems every page must not have: console errors, page errors, requests
// leaving the origin. HTTP error statuses a step provokes on purpose (a 400
// from the bad form, 401s of a revoked key) are allowed while that step runs.
const problems = [];
let allowStatus = new Set();
let current = 'setup';
function watch(page, label) {
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const text = msg.text();
    const m = text.match(/status of (\d{3})/);
    if (m && allowStatus.has(Number(m[1]))) return;
    problems.push(`[${label}] console error during "${current}": ${text} (${msg.location()?.url ?? ''})`);
  });
  page.on('pageerror', (err) => problems.push(`[${label}] page error during "${current}": ${err.message}`));
  page.on('request', (req) => {
    const u = req.url();
    if (u.startsWith('data:') || u.startsWith('blob:')) return;
    let origin;
    try {
      origin = new URL(u).origin;
    } catch {
      origin = u;
    }
    if (origin !== ORIGIN) problems.push(`[${label}] request to another origin during "${current}": ${u}`);
  });
}

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
});
const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, baseURL: BASE });
await ctx.tracing.start({ screenshots: true, snapshots: true });
ctx.setDefaultTimeout(T.short);
const page = await ctx.newPage();
watch(page, 'admin');

// Steps run in order; a failed step is reported and the steps that need it
// are skipped, the others still run (so one run shows every broken flow).
const failures = [];
const passed = [];
const skipped = [];
async function step(name, fn, needs = []) {
  const missing = needs.filter((n) => !passed.includes(n));
  if (missing.length) {
    skipped.push(name);
    console.error(`SKIP ${name}: needs "${missing.join('", "')}"`);
    return;
  }
  current = name;
  const t0 = Date.now();
  try {
    await fn();
    passed.push(name);
    console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)}s)`);
  } catch (e) {
    failures.push(name);
    // Playwright's call logs are long: their first lines say enough. An
    // axe report is printed whole.
    console.error(`FAIL ${name}: ${e.message.split('\n').slice(0, e.whole ? undefined : 12).join('\n     ')}`);
    await page.screenshot({ path: join(ARTIFACTS, `FAILED-${name.replace(/\W+/g, '-')}.png`), fullPage: true }).catch(() => {});
  } finally {
    allowStatus = new Set();
  }
}
async function shot(p, name) {
  await p.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}
const norm = (s) => s.replace(/\s+/g, ' ').trim();
function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

// a11y runs axe-core on the page as it is now, with the WCAG 2.0/2.1 A and
// AA rules (color-contrast among them). The source goes in through
// page.evaluate, that is CDP's Runtime evaluation, which the page's CSP
// (script-src 'self', no 'unsafe-eval') does not govern: the CSP stays as
// the gateway sends it (checked at login) and no bypassCSP is used. Serious
// and critical violations fail the step; moderate and minor ones are notes.
const AXE_OPTIONS = {
  runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] },
  resultTypes: ['violations'],
};
const a11yRuns = [];
async function a11y(p, label) {
  if (!(await p.evaluate(() => typeof window.axe?.run === 'function'))) await p.evaluate(AXE_SOURCE);
  check(await p.evaluate(() => typeof window.axe?.run === 'function'), `${label}: axe-core did not load in the page`);
  const { violations, ran } = await p.evaluate(async (options) => {
    const r = await window.axe.run(document, options);
    return {
      ran: [...r.passes, ...r.violations, ...r.incomplete, ...r.inapplicable].map((x) => x.id),
      violations: r.violations.map((v) => ({
        id: v.id, impact: v.impact, help: v.help, helpUrl: v.helpUrl,
        nodes: v.nodes.map((n) => ({ target: n.target.join(' '), summary: n.failureSummary })),
      })),
    };
  }, AXE_OPTIONS);
  check(ran.length >= 20 && ran.includes('color-contrast') && ran.includes('label'), `${label}: axe ran only ${ran.length} rules (${ran.slice(0, 8).join(', ')}…)`);
  a11yRuns.push(label);
  const fmt = (v) => `${v.id} (${v.impact}): ${v.help} [${v.helpUrl}]\n` +
    v.nodes.slice(0, 6).map((n) => `         ${n.target}: ${(n.summary ?? '').replace(/\s+/g, ' ').slice(0, 240)}`).join('\n') +
    (v.nodes.length > 6 ? `\n         … and ${v.nodes.length - 6} more` : '');
  const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  for (const v of violations.filter((x) => !bad.includes(x))) console.log(`     note: axe on ${label}: ${fmt(v)}`);
  if (bad.length) {
    throw Object.assign(new Error(`axe on ${label}: ${bad.length} serious or critical violation(s):\n` + bad.map(fmt).join('\n')), { whole: true });
  }
}
async function login(p, key) {
  await p.goto('/');
  const field = p.getByLabel('API key');
  await field.waitFor();
  check((await field.getAttribute('type')) === 'password', 'the API key field is not a password field');
  await field.fill(key);
  await p.getByRole('button', { name: 'Sign in' }).click();
  await p.getByRole('navigation', { name: 'Main' }).waitFor();
  check(!p.url().includes(key), 'the key appears in the URL');
}
async function go(p, link) {
  await p.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: link, exact: true }).click();
  await p.getByRole('heading', { level: 1 }).first().waitFor();
}
// turnOver waits until the chat turn has ended (Cancel disabled again).
const turnOver = () => page.waitForFunction(() => document.querySelector('.chat .actions button:not(.btn-primary)')?.disabled === true, null, { timeout: T.chat });
const row = () => page.getByRole('list', { name: 'Servers' }).getByRole('listitem').filter({ hasText: SLUG + ' ·' });

let serverName = '';
let secondCtx = null;
let userCtx = null;
try {
  await step('login with the admin key', async () => {
    const resp = await page.goto('/');
    // The page keeps the gateway's strict CSP (axe goes in through CDP, see a11y).
    const csp = resp.headers()['content-security-policy'] ?? '';
    check(/script-src 'self'(;|$)/.test(csp) && !/unsafe-(eval|inline)/.test(csp), `the console's CSP is not the strict one: "${csp}"`);
    await page.getByLabel('API key').waitFor();
    await shot(page, 'login');
    await a11y(page, 'the login screen');
    // The check can fail on this page: a low-contrast, unlabelled control
    // added for a moment is reported (then removed).
    await page.evaluate(() => {
      const probe = document.createElement('div');
      probe.id = 'axe-probe';
      const text = probe.appendChild(document.createElement('p'));
      text.textContent = 'low contrast probe';
      text.style.color = '#b0b0b0';
      text.style.background = '#ffffff';
      probe.appendChild(document.createElement('input')).type = 'text';
      document.querySelector('main')?.appendChild(probe);
    });
    const caught = await a11y(page, 'a probe').then(() => '', (e) => e.message);
    await page.evaluate(() => document.getElementById('axe-probe')?.remove());
    check(/color-contrast \(serious\)/.test(caught) && /label \(critical\)/.test(caught) && caught.includes('#axe-probe'), `axe did not report the probe's violations: ${caught || 'none reported'}`);
    await login(page, ADMIN_KEY);
    await page.getByRole('link', { name: 'Keys and agents' }).waitFor();
    check(await page.evaluate((k) => Object.values(sessionStorage).includes(k) && localStorage.length === 0 && document.cookie === '', ADMIN_KEY), 'the key must be in sessionStorage only');
  });

  await step('servers page loads', async () => {
    await go(page, 'Servers');
    await page.getByRole('heading', { name: 'Servers', level: 1 }).waitFor();
    await page.getByRole('list', { name: 'Servers' }).waitFor({ state: 'attached' });
    await shot(page, 'servers');
  }, ["login with the admin key"]);

  await step('add: search the registry and pick the entry', async () => {
    await go(page, 'Add server');
    const next = page.getByRole('button', { name: 'Next' });
    check(await next.isDisabled(), 'Next must be disabled before a URL or a result');
    check(await page.getByLabel('Search', { exact: true }).isDisabled(), 'Search must be disabled until a registry is selected');
    await page.getByLabel('Registry').selectOption('official');
    await page.getByLabel('Search', { exact: true }).fill(SEARCH);
    await page.getByRole('button', { name: 'Search', exact: true }).click();
    const result = page.getByRole('radio', { name: new RegExp(esc(ENTRY)) });
    await result.waitFor();
    const label = page.locator('.result', { has: result });
    check(/\[Official\]/.test(await label.innerText()), 'the result has no [Official] source badge');
    await result.check();
    check(await next.isEnabled(), 'Next must be enabled once a result is selected');
    await shot(page, 'add');
    await a11y(page, 'Add with search results');
    await next.click();
    await page.getByRole('heading', { name: /^Configure:/, level: 1 }).waitFor();
    // What the entry makes run shows before Save: the command line and its
    // environment, the secret's value never.
    const runs = page.getByRole('group', { name: 'What will run' });
    const runsText = await runs.innerText();
    check(/npx -y \S+@\d/.test(runsText), `What will run shows no npx command line: ${runsText}`);
    check(runsText.includes(SECRET + '=(secret)'), `What will run does not mark ${SECRET} secret: ${runsText}`);
    await a11y(page, 'Configure');
  }, ["login with the admin key"]);

  await step('configure: an empty name shows the field error', async () => {
    allowStatus = new Set([400]);
    const name = page.getByLabel('Name', { exact: true });
    serverName = await name.inputValue();
    check(serverName !== '', 'the Name field has no default');
    await name.fill('');
    await page.getByLabel(SECRET, { exact: true }).fill('e2e-secret-value');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.waitForFunction(() => document.activeElement?.getAttribute('aria-invalid') === 'true', null, { timeout: T.short });
    check((await name.getAttribute('aria-invalid')) === 'true', 'Name is not marked aria-invalid');
    const described = (await name.getAttribute('aria-describedby')) ?? '';
    const errId = described.split(' ').find((id) => id.endsWith('-err'));
    check(errId, 'Name has no error element in aria-describedby');
    const msg = (await page.locator('#' + errId).innerText()).trim();
    check(/name/i.test(msg), `the error next to Name does not talk about the name: "${msg}"`);
    await shot(page, 'configure-error');
    await a11y(page, 'Configure with a field error');
    allowStatus = new Set();
  }, ["add: search the registry and pick the entry"]);

  await step('configure: save with the secret', async () => {
    await page.getByLabel('Name', { exact: true }).fill(serverName);
    await page.getByRole('button', { name: 'Save' }).click();
    await page.waitForURL(/#\/servers$/);
    await row().waitFor();
    const text = await row().innerText();
    check(text.includes('Disabled'), `a new server starts disabled: ${text}`);
    check((await row().getByRole('switch').getAttribute('aria-checked')) === 'false', 'the switch of a new server is on');
  }, ["add: search the registry and pick the entry"]);

  await step('enable: the badge turns Connected', async () => {
    const sw = row().getByRole('switch', { name: 'Enable ' + serverName });
    await sw.click();
    await page.waitForFunction(([slug]) => {
      const li = [...document.querySelectorAll('ul.servers > li')].find((l) => l.textContent.includes(slug + ' ·'));
      return li?.querySelector('.badge')?.textContent === 'Connected';
    }, [SLUG], { timeout: T.start });
    check((await sw.getAttribute('aria-checked')) === 'true', 'the switch is not on');
    await shot(page, 'servers-connected');
  }, ["configure: save with the secret"]);

  await step('tools: the server lists its tools with schemas', async () => {
    const r = row();
    const btn = r.getByRole('button', { name: 'Tools' });
    await btn.click();
    check((await btn.getAttribute('aria-expanded')) === 'true', 'Tools is not aria-expanded');
    const list = r.getByRole('list', { name: 'Tools of ' + serverName });
    await list.waitFor();
    const tool = list.getByRole('listitem').filter({ has: page.getByText(TOOL, { exact: true }) });
    await tool.waitFor();
    await tool.getByText('Input schema').click();
    const schema = (await tool.locator('pre').innerText());
    check(/"type"/.test(schema) && /"properties"|"object"/.test(schema), `no input schema shown: ${schema.slice(0, 200)}`);
    await shot(page, 'servers-tools');
    await a11y(page, 'Servers with a server expanded');
  }, ["enable: the badge turns Connected"]);

  await step('chat: a message runs the tool and streams the reply', async () => {
    await go(page, 'Chat');
    const profile = page.getByLabel('Profile', { exact: true });
    await page.waitForFunction(() => document.querySelector('.chat-side select') !== null, null, { timeout: 5000 }).catch(() => {});
    if ((await profile.evaluate((el) => el.tagName)) === 'SELECT') await profile.selectOption(PROFILE);
    else await profile.fill(PROFILE);
    await page.getByRole('textbox', { name: 'Message' }).fill(MESSAGE);
    await page.getByRole('button', { name: 'Send' }).click();
    const log = page.getByRole('log', { name: 'Messages' });
    await log.getByText(`✓ ${SLUG}.${TOOL} completed`).waitFor({ timeout: T.chat });
    await log.getByText(REPLY).waitFor({ timeout: T.chat });
    await turnOver();
    await shot(page, 'chat');
    await a11y(page, 'Chat with a tool call');
  }, ["enable: the badge turns Connected"]);

  // Seeds/002 §11.2: "Red X + error message = failure".
  await step('chat: a failed tool call shows ✗ and its message', async () => {
    const log = page.getByRole('log', { name: 'Messages' });
    await page.getByRole('textbox', { name: 'Message' }).fill(FAIL_PROMPT);
    await page.getByRole('button', { name: 'Send' }).click();
    const card = log.locator('.toolcall').filter({ hasText: `${SLUG}.${FAIL_TOOL}` });
    await card.locator('.tc-head', { hasText: `${SLUG}.${FAIL_TOOL} failed` }).waitFor({ timeout: T.chat });
    check((await card.count()) === 1, `${await card.count()} cards for the call of ${FAIL_TOOL}`);
    const head = norm(await card.locator('.tc-head').innerText());
    check(head.startsWith(`✗ ${SLUG}.${FAIL_TOOL} failed`), `the failed call's head: "${head}"`);
    const body = (await card.locator('.tc-body').innerText()).trim();
    // The tool's own message: its input schema wants a number for a.
    check(body !== 'The tool call failed.' && /number/i.test(body) && /\ba\b/.test(body), `the failed call does not show the tool's message: "${body}"`);
    check(await card.evaluate((el) => el.classList.contains('tc-failed')), 'the card is not styled as failed');
    await log.getByText(FAIL_REPLY).waitFor({ timeout: T.chat });
    await turnOver();
    await shot(page, 'chat-failed');
    await a11y(page, 'Chat with a failed tool call');
  }, ["chat: a message runs the tool and streams the reply"]);

  // §11.2: spinner + "Using {tool}..." while it runs, then "Clock + timed
  // out". The call outlasts the chat's call timeout (--chat-call-timeout).
  // The runner gets the call's deadline and often answers "timed out" a
  // moment before the loop's own timer fires: the loop must still show ⏱.
  await step('chat: a call past the call timeout: spinner, then its timeout', async () => {
    const log = page.getByRole('log', { name: 'Messages' });
    await page.getByRole('textbox', { name: 'Message' }).fill(TIMEOUT_PROMPT);
    await page.getByRole('button', { name: 'Send' }).click();
    const card = log.locator('.toolcall').filter({ hasText: `${SLUG}.${TIMEOUT_TOOL}` });
    await card.getByText(`Using ${SLUG}.${TIMEOUT_TOOL}...`).waitFor({ timeout: T.chat });
    check(await card.locator('.spinner').isVisible(), 'no spinner while the call runs');
    const args = norm(await card.locator('.args').innerText());
    check(new RegExp(`duration: ${TIMEOUT_DURATION}\\b`).test(args), `the running call does not show its arguments: "${args}"`);
    await shot(page, 'chat-running');
    await card.locator('.tc-head').filter({ hasText: new RegExp(`${esc(SLUG)}\\.${esc(TIMEOUT_TOOL)} (timed out|failed)`) }).waitFor({ timeout: T.chat });
    check((await card.locator('.spinner').count()) === 0, 'the spinner is still there');
    const head = norm(await card.locator('.tc-head').innerText());
    const body = norm(await card.locator('.tc-body').innerText());
    check(/timed out after \d/.test(body), `the call's message does not say it timed out: "${body}"`);
    check(head.startsWith(`⏱ ${SLUG}.${TIMEOUT_TOOL} timed out`), `the timed-out call's head: "${head}", want ⏱ timed out`);
    check(await card.evaluate((el) => el.classList.contains('tc-timed_out')), 'the card is not styled as timed out');
    await log.getByText(TIMEOUT_REPLY).waitFor({ timeout: T.chat });
    await turnOver();
    await shot(page, 'chat-timed-out');
  }, ["chat: a message runs the tool and streams the reply"]);

  // A tool call's server asks the user for input (a form elicitation): the
  // form is built from its schema (labels, required marks), the chat
  // service's field error for an age out of bounds shows at the Age field,
  // then the corrected answer, given after the chat's call timeout (the
  // user's time does not count against it), is accepted and the turn goes on.
  await step("chat: a server's form answered inline", async () => {
    const log = page.getByRole('log', { name: 'Messages' });
    await page.getByRole('textbox', { name: 'Message' }).fill(INPUT_PROMPT);
    await page.getByRole('button', { name: 'Send' }).click();
    const form = log.getByRole('form', { name: `${INPUT_TOOL} asks: Who are you?` });
    await form.waitFor({ timeout: T.chat });
    const shown = Date.now();
    const name = form.getByLabel('name *', { exact: true });
    check((await name.getAttribute('aria-required')) === 'true', 'the required field is not aria-required');
    const age = form.getByLabel('Age', { exact: true });
    check((await age.getAttribute('type')) === 'number', 'Age is not a number input');
    check((await form.getByLabel('Favourite colour', { exact: true }).locator('option').allInnerTexts()).join(',') === '(none),red,green,blue', 'the colour choices');
    await name.fill('Ada');
    await age.fill('200');
    allowStatus = new Set([400]);
    await form.getByRole('button', { name: 'Accept' }).click();
    await page.waitForFunction(() => document.querySelector('.tc-input input[aria-invalid="true"]') !== null, null, { timeout: T.short });
    check((await age.getAttribute('aria-invalid')) === 'true', 'the field error is not at Age');
    const ageErr = norm(await form.locator('.field-error:not([hidden])').innerText());
    check(/at most 150/.test(ageErr), `the Age error: "${ageErr}"`);
    await shot(page, 'chat-input');
    await a11y(page, 'Chat with a form and a field error');
    allowStatus = new Set();
    await age.fill('36');
    await form.getByLabel('Favourite colour', { exact: true }).selectOption('green');
    const pastTimeout = CALL_TIMEOUT_MS + 1000 - (Date.now() - shown);
    if (pastTimeout > 0) await page.waitForTimeout(pastTimeout);
    await form.getByRole('button', { name: 'Accept' }).click();
    await log.locator('.tc-input').getByText('Answered.').waitFor({ timeout: T.short });
    await log.getByText(INPUT_REPLY).waitFor({ timeout: T.chat });
    await turnOver();
  }, ["chat: a message runs the tool and streams the reply"]);

  // A held call's card stays where it is while it waits: one step calls
  // the test server's echo (held: the profile asks) and its ask, whose form
  // comes 2 s later, below the held card, with the log full. The log used
  // to scroll to its end on each change, moving the Approve under a
  // pointer aimed at it; it now holds still and offers "New messages below".
  await step('chat: a held call stays in place while the turn goes on', async () => {
    const log = page.getByRole('log', { name: 'Messages' });
    const srv = INPUT_TOOL.replace(/\.ask$/, '');
    const profile = page.getByLabel('Profile', { exact: true });
    await profile.selectOption(HOLD_PROFILE);
    try {
      await page.getByRole('textbox', { name: 'Message' }).fill(HOLD_PROMPT);
      await page.getByRole('button', { name: 'Send' }).click();
      const held = log.locator('.toolcall').filter({ hasText: `${srv}.echo needs your approval` });
      const approve = held.getByRole('button', { name: 'Approve', exact: true });
      await approve.waitFor({ timeout: T.chat });
      await page.mouse.move(0, 0); // the pointer is elsewhere: the first card in view is kept
      // Measured in one go with what the log holds: the form must not be there yet.
      const at = async () => page.evaluate(() => {
        const b = [...document.querySelectorAll('.chat-log .tc-awaiting_approval')].find((c) => c.textContent.includes('.echo needs your approval'))?.querySelector('.actions button');
        const log = document.querySelector('.chat-log');
        return { y: b?.getBoundingClientRect().y, form: !!log.querySelector('.tc-input form'), overflows: log.scrollHeight > log.clientHeight };
      });
      const before = await at();
      check(!before.form, 'the form came before the held card was measured (the test measures nothing)');
      check(before.overflows, 'the log does not overflow (the test measures nothing)');
      const form = log.getByRole('form', { name: `${INPUT_TOOL} asks: Who is approving?` });
      await form.waitFor({ state: 'attached', timeout: T.chat });
      const after = await at();
      check(before.y !== undefined && before.y === after.y, `the held call's Approve moved from y=${before.y} to y=${after.y} when a form came below it`);
      const more = page.getByRole('button', { name: 'New messages below' });
      check(await more.isVisible(), 'nothing says there are new messages below');
      await shot(page, 'chat-held');
      await a11y(page, 'Chat with a held call and new messages below');
      await approve.click();
      await more.click();
      await form.getByRole('button', { name: 'Decline' }).click();
      await log.locator('.toolcall').filter({ hasText: `${srv}.echo completed` }).waitFor({ timeout: T.chat });
      await log.getByText(HOLD_REPLY).waitFor({ timeout: T.chat });
      await turnOver();
    } finally {
      // A turn left waiting (the step failed) would keep its held call
      // on the Approvals page of the steps after.
      const cancel = page.getByRole('button', { name: 'Cancel turn' });
      if (await cancel.isEnabled().catch(() => false)) {
        await cancel.click().catch(() => {});
        await turnOver().catch(() => {});
      }
      await profile.selectOption(PROFILE).catch(() => {});
    }
  }, ["chat: a message runs the tool and streams the reply"]);

  await step('activity: the call is listed', async () => {
    await go(page, 'Activity');
    const r = page.getByRole('table').getByRole('row').filter({ hasText: SLUG }).filter({ has: page.getByRole('cell', { name: TOOL, exact: true }) }).first();
    await r.waitFor();
    const cells = await r.getByRole('cell').allInnerTexts();
    check(cells[1] === SLUG && cells[2] === TOOL, `server/tool cells: ${cells.join(' | ')}`);
    check(/^\d+ ms$/.test(cells[3]), `no duration: ${cells[3]}`);
    check(cells[4] === 'ok', `outcome is not ok: ${cells[4]}`);
    if (cells[6]) {
      check(/^[0-9a-f]{32}$/.test(cells[6].trim()), `trace id cell: ${cells[6]}`);
      const link = r.getByRole('link', { name: cells[6].trim() });
      if (await link.count()) {
        // The only off-origin link: to Jaeger, in a new tab, never followed here.
        const href = await link.getAttribute('href');
        check(href.endsWith('/trace/' + cells[6].trim()), `the trace link is ${href}`);
        check((await link.getAttribute('target')) === '_blank' && /noopener/.test(await link.getAttribute('rel')), 'the trace link must open a new tab with rel=noopener');
      } else console.log('     (trace id shown without a link: no Jaeger URL configured)');
    } else console.log('     (no trace id on the call: the deployment has no tracing configured)');
    const byTool = (name) => page.getByRole('table').getByRole('row').filter({ has: page.getByRole('cell', { name, exact: true }) });
    if (passed.includes('chat: a failed tool call shows ✗ and its message')) {
      // The chat's failed call is listed as the tool's error, and the
      // outcome filter keeps it and drops the echo call.
      await page.getByLabel('Outcome').selectOption('tool_error');
      await byTool(FAIL_TOOL).first().waitFor();
      await byTool(TOOL).waitFor({ state: 'detached' });
      const fc = await byTool(FAIL_TOOL).first().getByRole('cell').allInnerTexts();
      check(fc[1] === SLUG && fc[4] === 'tool_error', `the failed call's row: ${fc.join(' | ')}`);
    }
    if (passed.includes('chat: a call past the call timeout: spinner, then its timeout')) {
      await page.getByLabel('Outcome').selectOption('');
      const sc = await byTool(TIMEOUT_TOOL).first().getByRole('cell').allInnerTexts();
      check(sc[4] !== 'ok', `the timed-out call is listed as ok: ${sc.join(' | ')}`);
      console.log(`     (the timed-out call: outcome ${sc[4]}, error "${norm(sc[5] ?? '')}")`);
    }
    await page.getByLabel('Outcome').selectOption('cancelled');
    await byTool(TOOL).waitFor({ state: 'detached' });
    await page.getByLabel('Outcome').selectOption('');
    await page.getByLabel('Text').fill(TOOL);
    await r.waitFor();
    await shot(page, 'activity');
    await a11y(page, 'Activity');
  }, ["chat: a message runs the tool and streams the reply"]);

  await step('edit: tool filter and timeout, then history and rollback', async () => {
    await go(page, 'Servers');
    const r = row();
    await r.getByRole('button', { name: 'Edit' }).click();
    const form = r.getByRole('form', { name: 'Edit ' + serverName });
    await form.getByLabel('Call timeout').fill('soon');
    await form.getByRole('button', { name: 'Save' }).click();
    // The submit handler marks the field at once; the wait only bounds a
    // slow render, and a miss says what the form held then.
    const marked = await form.locator('input[aria-invalid="true"]').first().waitFor({ timeout: 5000 }).then(() => true, () => false);
    if (!marked) {
      const state = (await form.count()) ? `value "${await form.getByLabel('Call timeout').inputValue()}", aria-invalid ${await form.getByLabel('Call timeout').getAttribute('aria-invalid')}` : 'the form is gone';
      check(false, `a bad duration is not marked invalid (${state})`);
    }
    await form.getByLabel('Call timeout').fill('45s');
    await form.getByLabel('Denied tools').fill('get-env');
    await form.getByRole('button', { name: 'Save' }).click();
    await form.waitFor({ state: 'detached' });
    await r.getByRole('button', { name: 'History' }).click();
    const table = r.getByRole('table');
    await table.waitFor();
    const rows = table.getByRole('row');
    check((await rows.count()) >= 3, 'the history lists fewer than two revisions');
    const current = await rows.filter({ hasText: '(current)' }).innerText();
    check(current.includes('deny get-env') && current.includes('call timeout 45s'), `the current revision does not show the edit: ${current}`);
    await shot(page, 'servers-history');
    const rollback = table.getByRole('button', { name: /^Roll back to / }).first();
    const label = await rollback.innerText();
    await rollback.click();
    await page.getByRole('dialog').getByRole('button', { name: 'Roll back' }).click();
    await page.getByText(new RegExp(`Rolled ${esc(serverName)} back to version`)).waitFor();
    console.log(`     (${label})`);
  }, ["enable: the badge turns Connected"]);

  await step('restart: the server comes back Connected', async () => {
    await row().getByRole('button', { name: 'Restart' }).click();
    await page.getByText(`${serverName} restarted.`).waitFor({ timeout: T.start });
    await page.waitForFunction(([slug]) => {
      const li = [...document.querySelectorAll('ul.servers > li')].find((l) => l.textContent.includes(slug + ' ·'));
      return li?.querySelector('.badge')?.textContent === 'Connected';
    }, [SLUG], { timeout: T.start });
  }, ["enable: the badge turns Connected"]);

  await step('responsive: the pages fit 640 px', async () => {
    await page.setViewportSize({ width: 640, height: 900 });
    for (const [link, name] of [['Servers', 'servers'], ['Add server', 'add'], ['Activity', 'activity'], ['Chat', 'chat'], ['Keys and agents', 'keys']]) {
      await go(page, link);
      await page.waitForTimeout(300);
      const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      check(over <= 1, `${link} overflows 640 px by ${over} px`);
      await shot(page, `${name}-640`);
    }
    await page.setViewportSize({ width: 1280, height: 900 });
  }, ["login with the admin key"]);

  await step('disable: the badge turns Disabled', async () => {
    await go(page, 'Servers');
    const sw = row().getByRole('switch', { name: 'Enable ' + serverName });
    await sw.click();
    await page.waitForFunction(([slug]) => {
      const li = [...document.querySelectorAll('ul.servers > li')].find((l) => l.textContent.includes(slug + ' ·'));
      return li?.querySelector('.badge')?.textContent === 'Disabled';
    }, [SLUG], { timeout: T.start });
    check((await sw.getAttribute('aria-checked')) === 'false', 'the switch is still on');
  }, ["enable: the badge turns Connected"]);

  await step('delete: the confirmation dialog (Escape cancels, Delete removes)', async () => {
    const title = `Delete "${serverName}"?`;
    await row().getByRole('button', { name: 'Delete' }).click();
    let dlg = page.getByRole('dialog', { name: title });
    await dlg.waitFor();
    await dlg.getByText('This will remove the MCP and its stored credentials.').waitFor();
    check(await dlg.getByRole('button', { name: 'Cancel' }).evaluate((el) => el === document.activeElement), 'focus is not in the dialog');
    await page.keyboard.press('Tab');
    check(await dlg.evaluate((d) => d.contains(document.activeElement)), 'Tab leaves the dialog');
    await shot(page, 'delete-dialog');
    await a11y(page, 'the delete dialog');
    await page.keyboard.press('Escape');
    await dlg.waitFor({ state: 'detached' });
    check(await row().count() === 1, 'Escape deleted the server');
    await row().getByRole('button', { name: 'Delete' }).click();
    dlg = page.getByRole('dialog', { name: title });
    await dlg.getByRole('button', { name: 'Delete' }).click();
    // Its row stays in place, marked, until the page is left (the rows
    // below must not move up under the pointer).
    await row().locator('.badge', { hasText: 'Removed' }).waitFor();
    check(await row().getByRole('switch').isDisabled(), "a deleted server's switch can still be used");
    await page.reload();
    await page.getByRole('heading', { name: 'Servers', level: 1 }).waitFor();
    await page.waitForTimeout(1000);
    check(await row().count() === 0, 'the server is back after a reload');
  }, ["configure: save with the secret"]);

  await step('add: a bad URL shows the error next to the field', async () => {
    allowStatus = new Set([400]);
    await go(page, 'Add server');
    await page.getByLabel('URL', { exact: true }).fill('https://');
    await page.getByRole('button', { name: 'Next' }).click();
    await page.getByRole('heading', { name: /^Configure:/, level: 1 }).waitFor();
    await page.getByRole('button', { name: 'Save' }).click();
    const url = page.getByLabel('URL', { exact: true });
    await page.waitForFunction(() => document.querySelector('[aria-invalid="true"]') !== null);
    check((await url.getAttribute('aria-invalid')) === 'true', 'the URL field is not marked invalid');
    await shot(page, 'configure-url-error');
    allowStatus = new Set();
  }, ["login with the admin key"]);

  // Seeds/002 §1.7: the Smithery entry's config schema becomes one labelled
  // field per input of its install plan; Save validates the required ones.
  await step('add: a Smithery config schema gives labelled fields', async () => {
    await go(page, 'Servers'); // leaves a Configure page the previous step may have left on #/add
    await go(page, 'Add server');
    await page.getByLabel('URL', { exact: true }).fill('');
    await page.getByLabel('Registry').selectOption('smithery');
    await page.getByLabel('Search', { exact: true }).fill(SMITHERY_SEARCH);
    await page.getByRole('button', { name: 'Search', exact: true }).click();
    const result = page.getByRole('radio', { name: new RegExp(esc(SMITHERY_ENTRY)) });
    await result.waitFor();
    const badges = await page.locator('.result', { has: result }).locator('.src-badge').allInnerTexts();
    check(badges.length === 1 && badges[0] === '[Smithery]', `the result's source badges are ${JSON.stringify(badges)}, not [Smithery]`);
    await result.check();
    await page.getByRole('button', { name: 'Next' }).click();
    await page.getByRole('heading', { name: /^Configure:/, level: 1 }).waitFor();
    await page.getByText(`From the Smithery registry: ${SMITHERY_ENTRY}`).waitFor();

    // The inputs, as the install plan the page read has them.
    const resp = await ctx.request.post('/api/v1/registry/plan', {
      headers: { Authorization: 'Bearer ' + ADMIN_KEY },
      data: { name: SMITHERY_ENTRY, registry: 'smithery' },
    });
    check(resp.ok(), `POST /api/v1/registry/plan: ${resp.status()}`);
    const plan = await resp.json();
    const inputs = plan.inputs ?? [];
    const required = inputs.filter((i) => i.required);
    check(required.length >= 1 && inputs.length > required.length, `the plan should have required and optional inputs: ${JSON.stringify(inputs)}`);
    check((plan.missing ?? []).length >= 1, 'the plan misses no value: nothing to validate');
    const settings = page.getByRole('group', { name: 'Settings' });
    const fieldsShown = await settings.locator('.field').count();
    check(fieldsShown === inputs.length, `${fieldsShown} fields under Settings for ${inputs.length} inputs`);
    for (const inp of inputs) {
      const label = inp.required ? inp.name : `${inp.name} (optional)`;
      const f = settings.getByLabel(label, { exact: true });
      check((await f.count()) === 1, `no single field labelled "${label}" for input ${inp.name}`);
      check(((await f.getAttribute('aria-required')) === 'true') === inp.required,
        `${inp.name}: aria-required is ${await f.getAttribute('aria-required')} for a${inp.required ? ' required' : 'n optional'} input`);
      const tag = await f.evaluate((el) => el.tagName);
      if (inp.choices?.length) {
        check(tag === 'SELECT', `${inp.name} has choices but is a ${tag}`);
        const opts = (await f.locator('option').allInnerTexts()).filter((o) => o !== '(none)');
        check(JSON.stringify(opts) === JSON.stringify(inp.choices), `${inp.name}: options ${opts} for choices ${inp.choices}`);
      } else {
        check(tag === 'INPUT', `${inp.name} is a ${tag}`);
        if (inp.format === 'number') check((await f.getAttribute('type')) === 'number', `${inp.name} is a number but not a number field`);
      }
      if (inp.default) check((await f.inputValue()) === inp.default, `${inp.name} does not show its default ${inp.default}`);
      const hint = (await f.getAttribute('aria-describedby') ?? '').split(' ').find((id) => id.endsWith('-hint'));
      if (inp.description) check(hint && (await page.locator('#' + hint).innerText()) === inp.description, `${inp.name}: its description is not its hint`);
    }
    // The secret the schema reads from a header is a credential, under Authentication.
    for (const c of (plan.credentials ?? []).filter((x) => x.kind !== 'config')) {
      const f = page.getByRole('group', { name: 'Authentication' }).getByLabel(c.required ? c.name : `${c.name} (optional)`, { exact: true });
      check((await f.getAttribute('type')) === 'password', `the credential ${c.name} is not a password field`);
      check(((await f.getAttribute('aria-required')) === 'true') === c.required, `the credential ${c.name}: aria-required is ${await f.getAttribute('aria-required')}`);
    }
    await shot(page, 'configure-smithery');
    await a11y(page, 'Configure from a Smithery config schema');

    // Save with the required inputs empty: the error next to each.
    const empty = required.filter((i) => !i.default && !i.value);
    check(empty.length >= 1, 'every required input has a value: nothing to leave empty');
    await page.getByRole('button', { name: 'Save' }).click();
    for (const inp of empty) {
      const f = settings.getByLabel(inp.name, { exact: true });
      await page.waitForFunction((id) => document.getElementById(id)?.getAttribute('aria-invalid') === 'true', await f.getAttribute('id'));
      const errId = (await f.getAttribute('aria-describedby') ?? '').split(' ').find((id) => id.endsWith('-err'));
      check(errId, `${inp.name} has no error element in aria-describedby`);
      const err = page.locator('#' + errId);
      check(await err.isVisible(), `the error of ${inp.name} is not shown`);
      check((await err.innerText()).trim() === `${inp.name} is required.`, `the error of ${inp.name}: "${await err.innerText()}"`);
      // Next to it: in the field's own row.
      check(await f.evaluate((el, id) => el.closest('.field')?.contains(document.getElementById(id)) === true, errId), `the error of ${inp.name} is not next to the field`);
    }
    check(await page.evaluate(() => document.activeElement?.getAttribute('aria-invalid') === 'true'), 'the focus is not on a field in error');
    await page.getByRole('heading', { name: /^Configure:/, level: 1 }).waitFor(); // not saved
    await shot(page, 'configure-smithery-error');
    await a11y(page, 'Configure from a Smithery config schema, with field errors');
    await page.getByRole('button', { name: 'Cancel' }).click();
    await page.getByRole('button', { name: 'Next' }).waitFor();
  }, ["login with the admin key"]);

  let newKey = '';
  const keyName = 'e2e-second-' + Date.now().toString(36);
  await step('authorize: a remote server that wants OAuth is authorized from its row', async () => {
    await go(page, 'Servers');
    const r = page.getByRole('list', { name: 'Servers' }).getByRole('listitem').filter({ hasText: OAUTH_SERVER + ' ·' });
    const auth = r.getByRole('button', { name: 'Authorize ' + OAUTH_SERVER });
    check(await auth.isHidden(), 'Authorize shows before the server refused mcpbus');
    // A server saved with auth_type oauth and no tokens offers it at once.
    await page.getByRole('list', { name: 'Servers' }).getByRole('listitem').filter({ hasText: OAUTH_NEW + ' ·' })
      .getByRole('button', { name: 'Authorize ' + OAUTH_NEW }).waitFor();
    // Enabling is refused (the upstream's 401, relayed): the console stays
    // signed in, says why and offers Authorize.
    allowStatus = new Set([401]);
    await r.getByRole('switch', { name: 'Enable ' + OAUTH_SERVER }).click();
    await auth.waitFor();
    await page.getByText('Authentication failed. Check your API key.').first().waitFor();
    check(await page.getByRole('navigation', { name: 'Main' }).isVisible(), 'a refused enable signed the console out');
    await a11y(page, 'servers: Authorize');
    // The authorization page opens in a new tab; the test's authorization
    // server approves at once and sends that tab to the gateway's callback.
    const [tab] = await Promise.all([ctx.waitForEvent('page'), auth.click()]);
    await tab.getByText('mcpbus is authorized with ' + OAUTH_SERVER).waitFor({ timeout: T.start });
    await tab.close();
    // The row follows the outcome: authorized, enabled, Connected.
    await r.getByRole('status').getByText('Authorized ' + OAUTH_SERVER).first().waitFor({ timeout: T.start });
    await page.waitForFunction(([slug]) => {
      const li = [...document.querySelectorAll('ul.servers > li')].find((l) => l.textContent.includes(slug + ' ·'));
      return li?.querySelector('.badge')?.textContent === 'Connected';
    }, [OAUTH_SERVER], { timeout: T.start });
    check(await auth.isHidden(), 'Authorize still shows once the server is connected');
    await shot(page, 'servers-authorized');
  }, ['login with the admin key']);

  await step('my authorizations: a call key authorizes a per-user server for itself, then revokes', async () => {
    userCtx = await browser.newContext({ viewport: { width: 1280, height: 900 }, baseURL: BASE });
    userCtx.setDefaultTimeout(T.short);
    const p3 = await userCtx.newPage();
    watch(p3, 'call key');
    await login(p3, CALL_KEY);
    // A call-only key has no admin page.
    await p3.getByRole('navigation', { name: 'Main' }).waitFor();
    const links = await p3.getByRole('navigation', { name: 'Main' }).getByRole('link').allTextContents();
    check(links.includes('My authorizations') && !links.includes('Servers') && !links.includes('Chat'), `a call key sees the pages ${links.join(', ')}`);
    await go(p3, 'My authorizations');
    const card = p3.getByRole('region', { name: PER_USER });
    await card.getByText('Not authorized').waitFor();
    await a11y(p3, 'My authorizations');
    const [tab] = await Promise.all([userCtx.waitForEvent('page'), card.getByRole('button', { name: 'Authorize ' + PER_USER }).click()]);
    await tab.getByText('mcpbus is authorized with ' + PER_USER).waitFor({ timeout: T.start });
    await tab.close();
    await card.getByText(/Authorized \(OAuth/).waitFor({ timeout: T.start });
    await shot(p3, 'my-authorizations');
    // The authorization is the key's own: the admin's page still says no.
    await go(page, 'My authorizations');
    await page.getByRole('region', { name: PER_USER }).getByText('Not authorized').waitFor();
    // Revoked, it is gone for this key.
    await card.getByRole('button', { name: 'Revoke ' + PER_USER }).click();
    await p3.getByRole('dialog', { name: `Revoke your authorization of ${PER_USER}?` }).getByRole('button', { name: 'Revoke' }).click();
    await card.getByText('Not authorized').waitFor();
    // The link an MCP client or the CLI shows (the start's authorization_url)
    // is the console's: opened in a fresh tab and signed in with the key that
    // started it, it goes on to the provider and back to the callback.
    const keyed = { Authorization: `Bearer ${CALL_KEY}` };
    const started = await fetch(BASE + `/api/v1/me/authorizations/${PER_USER}`, { method: 'POST', headers: keyed }).then((r) => r.json());
    check(typeof started.flow === 'string' && String(started.authorization_url).includes('/#/authorizations/continue/'), `the start's link: ${JSON.stringify(started).slice(0, 300)}`);
    const p4 = await userCtx.newPage();
    await p4.goto(started.authorization_url);
    await p4.getByLabel('API key').fill(CALL_KEY);
    await p4.getByRole('button', { name: 'Sign in' }).click();
    await p4.getByText('mcpbus is authorized with ' + PER_USER).waitFor({ timeout: T.start });
    await p4.close();
    const mine = await fetch(BASE + '/api/v1/me/authorizations', { headers: keyed }).then((r) => r.json());
    check(mine.authorizations?.find((a) => a.server === PER_USER)?.authorized === true, `after the link: ${JSON.stringify(mine).slice(0, 300)}`);
    const del = await fetch(BASE + `/api/v1/me/authorizations/${PER_USER}`, { method: 'DELETE', headers: keyed });
    check(del.ok, `revoking after the link: ${del.status}`);
  }, ['login with the admin key']);

  // The Servers list keeps its rows in place while servers come and go
  // (config events refresh it): a server added elsewhere goes below the
  // others, whatever its name, and one removed keeps its row, marked. It
  // used to be re-sorted and collapsed, moving the switches under the pointer.
  await step('servers: rows stay in place while servers are added and removed', async () => {
    const api = (method, path, body) => fetch(BASE + path, { method, headers: { Authorization: `Bearer ${ADMIN_KEY}`, 'Content-Type': 'application/json' }, body: body && JSON.stringify(body) });
    const stamp = Date.now().toString(36);
    const made = [];
    // Names that sort before every other server's; disabled, never run.
    const add = async (name) => {
      const url = `${BASE}/e2e-nowhere/${name}`;
      const r = await api('POST', '/api/v1/servers', { config: { name, enabled: false, package: { type: 'http', identifier: url }, transport: { type: 'http', url } } });
      if (!r.ok) throw new Error(`adding ${name}: ${r.status} ${await r.text()}`);
      const cfg = await r.json();
      made.push(cfg.id);
      return cfg;
    };
    try {
      const gone = await add(`aaa-e2e-removed-${stamp}`);
      await go(page, 'Servers');
      const list = page.getByRole('list', { name: 'Servers' });
      const rowOf = (name) => list.getByRole('listitem').filter({ has: page.getByRole('heading', { name, exact: true }) });
      await rowOf(gone.name).waitFor();
      const sw = list.getByRole('switch', { name: 'Enable ' + INPUT_TOOL.replace(/\.ask$/, ''), exact: true });
      await sw.waitFor();
      const before = await sw.boundingBox();
      const added = await add(`aaa-e2e-added-${stamp}`);
      await rowOf(added.name).waitFor({ timeout: T.short });
      const afterAdd = await sw.boundingBox();
      check(before && afterAdd && before.y === afterAdd.y, `a switch moved from y=${before?.y} to y=${afterAdd?.y} when a server was added elsewhere`);
      const del = await api('DELETE', `/api/v1/servers/${encodeURIComponent(gone.id)}`);
      check(del.ok, `deleting ${gone.name}: ${del.status}`);
      await rowOf(gone.name).locator('.badge', { hasText: 'Removed' }).waitFor({ timeout: T.short });
      const afterDel = await sw.boundingBox();
      check(afterDel && before.y === afterDel.y, `a switch moved from y=${before?.y} to y=${afterDel?.y} when a server was removed elsewhere`);
      check(await rowOf(gone.name).getByRole('switch').isDisabled(), "a removed server's switch can still be used");
      await a11y(page, 'Servers with a removed server');
    } finally {
      for (const id of made) await api('DELETE', `/api/v1/servers/${encodeURIComponent(id)}`).catch(() => {});
    }
  }, ['login with the admin key']);

  await step('approvals: a held call of a client that cannot ask is approved here', async () => {
    // The test server's echo (tool "<server>.ask" of the input flow) under an ask rule;
    // /mcp/invoke cannot ask its caller, so the call waits for this page.
    const tool = INPUT_TOOL.replace(/\.ask$/, '__echo');
    const marker = 'approved in the console ' + Date.now().toString(36);
    const api = (method, path, body) => fetch(BASE + path, { method, headers: { Authorization: `Bearer ${ADMIN_KEY}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    const put = await api('PUT', '/api/v1/approvals/rules', { rules: [{ tool, decision: 'ask' }], timeout_seconds: 60 });
    check(put.ok, `PUT approval rules: ${put.status}`);
    try {
      // Two held calls: the first is decided elsewhere (the API) while the
      // page shows both. Its row must stay where it was, no longer
      // decidable, so that the second call's row does not move up under a
      // pointer aimed at the first (a click meant for one call must not
      // land on another).
      const first = 'decided elsewhere ' + Date.now().toString(36);
      const firstCall = api('POST', '/mcp/invoke', { tool_name: tool, params: { message: first } }).then((r) => r.json());
      const firstRow = page.getByRole('row').filter({ hasText: first });
      await go(page, 'Approvals');
      await firstRow.waitFor({ timeout: T.short });
      const call = api('POST', '/mcp/invoke', { tool_name: tool, params: { message: marker } }).then((r) => r.json());
      const row = page.getByRole('row').filter({ hasText: marker });
      await row.waitFor({ timeout: T.short });
      await shot(page, 'approvals');
      await a11y(page, 'Approvals');
      const approve = row.getByRole('button', { name: /^Approve / });
      const before = await approve.boundingBox();
      const denied = await api('POST', `/api/v1/approvals/${encodeURIComponent(await firstRow.getAttribute('data-id'))}/deny`);
      check(denied.ok, `deny through the API: ${denied.status}`);
      await firstCall;
      // The page's next poll has seen it once it counts one held call.
      await page.getByText('1 held', { exact: true }).waitFor({ timeout: T.short });
      const after = await approve.boundingBox();
      check(before && after && before.y === after.y, `the held call's Approve moved from y=${before?.y} to y=${after?.y} when the call above it was decided elsewhere`);
      await firstRow.getByText('No longer held').waitFor({ timeout: T.short });
      check(await firstRow.getByRole('button').count() === 0, 'a call decided elsewhere can still be decided here');
      await approve.click();
      const res = await call;
      check(res.success === true && JSON.stringify(res.result).includes(marker), `the released call: ${JSON.stringify(res).slice(0, 300)}`);
      await row.getByText('Approved.').waitFor({ timeout: T.short });
      check(await row.getByRole('button').count() === 0, 'an approved call can still be decided');
    } finally {
      await api('PUT', '/api/v1/approvals/rules', {});
    }
  }, ['login with the admin key']);

  // Issue 31: the Tasks page. Tasks of the test server made over REST: one
  // done (sleep), one failed (its crash tool: the server exits mid-call), one
  // running (cancelled here), one reporting progress and ending while the
  // page shows it (pushed by its event stream), and a call key's own, which
  // only "Every principal's tasks" shows the admin.
  await step('tasks: done, failed and running tasks; filter, result, cancel, live end', async () => {
    const srv = INPUT_TOOL.replace(/\.ask$/, '');
    const create = async (key, ms) => {
      const r = await fetch(BASE + '/api/v1/tasks', { method: 'POST', headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ name: srv + '__sleep', arguments: { ms } }) });
      const body = await r.json();
      check(r.status === 202 && body.state === 'working', `POST /api/v1/tasks: ${r.status} ${JSON.stringify(body).slice(0, 300)}`);
      return body.id;
    };
    const admin = (path) => fetch(BASE + path, { headers: { Authorization: `Bearer ${ADMIN_KEY}` } }).then((r) => r.json());
    // Failed: the server exits mid-call (its crash tool); then it is back:
    // running again with a new start time (the task may fail before the
    // runner has noticed the exit, while the status still says running).
    const statusOf = async () => (await admin('/api/v1/status')).servers?.find((x) => x.server === srv);
    const startedBefore = (await statusOf())?.started_at;
    const crash = await fetch(BASE + '/api/v1/tasks', { method: 'POST', headers: { Authorization: `Bearer ${ADMIN_KEY}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: srv + '__crash', arguments: {} }) });
    const bad = (await crash.json()).id;
    check(crash.status === 202 && bad, `POST /api/v1/tasks (crash): ${crash.status}`);
    const until = async (what, ok) => {
      const end = Date.now() + T.chat;
      for (let last; Date.now() < end; await new Promise((r) => setTimeout(r, 300))) {
        last = await ok();
        if (last === true) return;
      }
      throw new Error(`timed out waiting for ${what}`);
    };
    await until('the crashed task to fail', async () => (await admin(`/api/v1/tasks/${bad}`)).state === 'failed');
    await until(`${srv} to be back`, async () => {
      const st = await statusOf();
      return st?.state === 'running' && st.started_at !== startedBefore;
    });
    const done = await create(ADMIN_KEY, 200);
    const long = await create(ADMIN_KEY, 120000);
    const theirs = await create(CALL_KEY, 100);
    const rowOf = (id, state) => page.locator(`tr[data-id="${id}"]` + (state ? `[data-state="${state}"]` : ''));
    const streamed = new Set();
    const onReq = (req) => {
      const m = req.url().match(/\/api\/v1\/tasks\/([0-9a-f-]+)\/events$/);
      if (m) streamed.add(m[1]);
    };
    page.on('request', onReq);
    try {
      await go(page, 'Tasks');
      await rowOf(done, 'completed').waitFor({ timeout: T.chat });
      await rowOf(bad, 'failed').waitFor({ timeout: T.chat });
      await rowOf(long, 'working').waitFor();
      check(await rowOf(theirs).count() === 0, "the admin's own list shows another key's task");
      await shot(page, 'tasks');
      await a11y(page, 'Tasks');

      await page.getByLabel('State').selectOption('failed');
      await rowOf(done).waitFor({ state: 'detached' });
      check(await rowOf(bad, 'failed').count() === 1 && await page.locator('tbody tr[data-state]:not([data-state="failed"])').count() === 0,
        'the state filter shows other states');
      await page.getByLabel('State').selectOption('');
      await rowOf(bad).getByRole('button', { name: /^Show the result/ }).click();
      const result = page.getByRole('region', { name: /^Result of / });
      const why = await admin(`/api/v1/tasks/${bad}/result`);
      const reason = why.error?.message || why.message || '';
      check(why.state === 'failed' && reason !== '', `the failed task: ${JSON.stringify(why).slice(0, 300)}`);
      await result.locator('.task-error').getByText(reason, { exact: true }).waitFor();
      await rowOf(done).getByRole('button', { name: /^Show the result/ }).click();
      await result.getByText('slept 200ms', { exact: true }).waitFor();
      await a11y(page, 'Tasks with a result');

      // Reports progress, then ends, while shown: its row shows the
      // progress, then turns completed, through its event stream.
      const prog = await fetch(BASE + '/api/v1/tasks', { method: 'POST', headers: { Authorization: `Bearer ${ADMIN_KEY}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ name: srv + '__progress', arguments: { steps: 8, ms: 1000 } }) });
      const soon = (await prog.json()).id;
      check(prog.status === 202 && soon, `POST /api/v1/tasks (progress): ${prog.status}`);
      await rowOf(soon, 'working').waitFor({ timeout: T.short });
      await rowOf(soon, 'working').locator('.task-progress').getByText(/^step [1-8] \([1-8]\/8\)$/).waitFor({ timeout: T.short });
      await rowOf(soon, 'completed').waitFor({ timeout: T.short });
      check(streamed.has(soon), "the page did not follow the working task's event stream");

      await rowOf(long).getByRole('button', { name: /^Cancel / }).click();
      await page.getByRole('dialog', { name: /^Cancel / }).getByRole('button', { name: 'Cancel task', exact: true }).click();
      await rowOf(long, 'cancelled').waitFor();

      await page.getByLabel("Every principal's tasks").check();
      await rowOf(theirs, 'completed').waitFor({ timeout: T.short });
      check(norm(await rowOf(theirs).innerText()).includes('key:'), `another key's task shows no principal: ${norm(await rowOf(theirs).innerText())}`);
      await shot(page, 'tasks-all');
    } finally {
      page.off('request', onReq);
    }
  }, ['login with the admin key']);

  await step('pins: a changed tool is reviewed and approved from its row', async () => {
    await go(page, 'Servers');
    const r = page.getByRole('list', { name: 'Servers' }).getByRole('listitem').filter({ hasText: DRIFT + ' ·' });
    await page.waitForFunction(([slug]) => {
      const li = [...document.querySelectorAll('ul.servers > li')].find((l) => l.textContent.includes(slug + ' ·'));
      return li?.querySelector('.badge')?.textContent === 'Connected';
    }, [DRIFT], { timeout: T.start });
    const changes = r.getByRole('region', { name: 'Tool changes of ' + DRIFT });
    check(await changes.isHidden(), 'tool changes show before the server changed anything');
    // The restart lists the tools again: the description drifted, so the
    // tool is withheld and the row shows the change (a tool_changed event).
    await r.getByRole('button', { name: 'Restart' }).click();
    await page.getByText(`${DRIFT} restarted.`).waitFor({ timeout: T.start });
    await changes.waitFor({ timeout: T.start });
    const pinned = norm(await changes.locator('pre.pin-old').first().textContent());
    const next = norm(await changes.locator('pre.pin-new').first().textContent());
    check(pinned === DRIFT_BEFORE && next === DRIFT_AFTER, `the change shows ${JSON.stringify(pinned)} → ${JSON.stringify(next)}`);
    check(norm(await changes.getByRole('rowheader').first().textContent()) === 'description', 'the changed field is not named');
    await a11y(page, 'servers: tool changes');
    await shot(page, 'servers-tool-change');
    // The server adds a tool (a change from nothing) that sorts before
    // lookup while lookup's change is on screen: lookup's Approve must stay
    // where it is, not become the new tool's under a pointer aimed at it.
    const approve = changes.getByRole('button', { name: 'Approve the new definition of lookup' });
    const before = await approve.boundingBox();
    const added = await fetch(DRIFT_ADD_URL + '?name=aaa', { method: 'POST' });
    check(added.ok, `adding a tool to the drift server: ${added.status}`);
    await changes.getByRole('button', { name: 'Approve the new definition of aaa' }).waitFor({ timeout: T.start });
    const after = await approve.boundingBox();
    check(before && after && before.y === after.y, `lookup's Approve moved from y=${before?.y} to y=${after?.y} when the server added a tool`);
    await approve.click();
    await page.getByText('Approved the new definition of lookup.').waitFor();
    await changes.getByRole('button', { name: 'Approve the new definition of aaa' }).click();
    await page.getByText('Approved the new definition of aaa.').waitFor();
    await changes.waitFor({ state: 'hidden' });
    // The approved definition is the one the tools list now.
    await r.getByRole('button', { name: 'Tools' }).click();
    await r.getByText(DRIFT_AFTER).waitFor({ timeout: T.start });
  }, ['login with the admin key']);

  await step('keys: create a key (shown once)', async () => {
    await go(page, 'Keys and agents');
    await page.getByRole('heading', { name: 'API keys', exact: true }).waitFor();
    const form = page.getByRole('form', { name: 'Create an API key' });
    await form.getByLabel('Name').fill(keyName);
    await form.getByRole('checkbox', { name: 'admin' }).check();
    await form.getByRole('button', { name: 'Create key' }).click();
    const box = page.getByLabel('New API key');
    await box.waitFor();
    newKey = await box.inputValue();
    check(/^mcpbus_/.test(newKey), `the new key looks wrong: ${newKey.slice(0, 10)}…`);
    await page.getByRole('button', { name: 'Copy' }).waitFor();
    await page.getByRole('button', { name: `Revoke ${keyName}` }).waitFor();
    await page.getByRole('heading', { name: 'Agents', exact: true }).waitFor();
    await shot(page, 'keys');
    await a11y(page, 'Keys and agents');
  }, ["login with the admin key"]);

  await step('keys: a revoked key is logged out', async () => {
    secondCtx = await browser.newContext({ viewport: { width: 1280, height: 900 }, baseURL: BASE });
    secondCtx.setDefaultTimeout(T.short);
    const p2 = await secondCtx.newPage();
    watch(p2, 'second key');
    await login(p2, newKey);
    await p2.getByRole('heading', { name: 'Servers', level: 1 }).waitFor();
    await p2.waitForFunction(() => document.querySelector('.live.on') !== null, null, { timeout: T.short });
    allowStatus = new Set([401]);
    await page.getByRole('button', { name: `Revoke ${keyName}` }).click();
    const dlg = page.getByRole('dialog', { name: `Revoke "${keyName}"?` });
    await dlg.getByRole('button', { name: 'Revoke' }).click();
    await dlg.waitFor({ state: 'detached' });
    await p2.getByLabel('API key').waitFor({ timeout: T.logout });
    await p2.getByText(/no longer valid/).waitFor();
    check(await p2.evaluate(() => sessionStorage.length === 0), 'the revoked key is still in sessionStorage');
    await shot(p2, 'logged-out');
    allowStatus = new Set();
  }, ["keys: create a key (shown once)"]);

  await step('agents: create and revoke an agent identity', async () => {
    const form = page.getByRole('form', { name: 'Create an agent' });
    const name = 'e2e-agent-' + Date.now().toString(36);
    await form.getByLabel('Agent name').fill(name);
    await form.getByLabel('Allowed tools').fill(`${SLUG}__*`);
    await form.getByRole('button', { name: 'Create agent' }).click();
    await page.getByText(`Agent "${name}" created.`).waitFor();
    const revoke = page.getByRole('button', { name: `Revoke agent ${name}` });
    await revoke.click();
    await page.getByRole('dialog', { name: `Revoke agent "${name}"?` }).getByRole('button', { name: 'Revoke' }).click();
    await revoke.waitFor({ state: 'detached' });
  }, ["keys: create a key (shown once)"]);

  // Issue 28: a chat key sees its own conversations only; an admin sees
  // everyone's, each with its owner.
  await step("chat: a user sees only their own conversations, the admin sees each owner", async () => {
    const convIDs = (p) => p.evaluate(() => [...document.querySelectorAll('.convs button.conv')].map((b) => b.dataset.id));
    // The list is loaded: entries, or its "None yet.".
    const listed = (p) => p.waitForFunction(() => document.querySelector('.convs li') !== null, null, { timeout: T.short });
    await go(page, 'Chat');
    await listed(page);
    const admins = await convIDs(page);
    check(admins.length > 0, "the admin's earlier conversations are not listed");
    await go(page, 'Keys and agents');
    const form = page.getByRole('form', { name: 'Create an API key' });
    const chatName = 'e2e-chat-' + Date.now().toString(36);
    await form.getByLabel('Name').fill(chatName);
    await form.getByRole('checkbox', { name: 'call' }).uncheck();
    await form.getByRole('checkbox', { name: 'chat' }).check();
    await form.getByRole('button', { name: 'Create key' }).click();
    await page.getByRole('button', { name: `Revoke ${chatName}` }).waitFor();
    const chatKey = await page.getByLabel('New API key').inputValue();
    const userCtx = await browser.newContext({ viewport: { width: 1280, height: 900 }, baseURL: BASE });
    userCtx.setDefaultTimeout(T.short);
    const p3 = await userCtx.newPage();
    try {
      watch(p3, 'chat key');
      await login(p3, chatKey);
      await go(p3, 'Chat');
      await listed(p3);
      const before = await convIDs(p3);
      check(before.length === 0, `a new chat key lists conversations: ${before.length} (the admin's: ${before.filter((id) => admins.includes(id)).length})`);
      await p3.getByLabel('Profile', { exact: true }).fill(PROFILE);
      await p3.getByRole('textbox', { name: 'Message' }).fill(MESSAGE);
      await p3.getByRole('button', { name: 'Send' }).click();
      await p3.getByRole('log', { name: 'Messages' }).getByText(REPLY).waitFor({ timeout: T.chat });
      await p3.waitForFunction(() => document.querySelectorAll('.convs button.conv').length > 0, null, { timeout: T.short });
      const theirs = await convIDs(p3);
      check(theirs.length === 1 && !admins.includes(theirs[0]), `the chat key lists ${JSON.stringify(theirs)}, want only its own`);
      check((await p3.locator('.convs .owner').count()) === 0, 'a user is shown owners');
      await shot(p3, 'chat-own-conversations');

      await go(page, 'Chat');
      await page.locator(`.convs button.conv[data-id="${theirs[0]}"]`).waitFor();
      const owners = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('.convs button.conv')]
        .map((b) => [b.dataset.id, b.querySelector('.owner')?.dataset.owner ?? null])));
      const other = owners[theirs[0]];
      check(typeof other === 'string' && other.startsWith('key:'), `the user's conversation shows owner ${other}`);
      check(admins.some((id) => owners[id] && owners[id] !== other),
        `the admin's own conversations are not shown with another owner: ${JSON.stringify(owners)}`);
      await shot(page, 'chat-owners');
    } catch (e) {
      await shot(p3, 'FAILED-chat-key-page').catch(() => {});
      throw e;
    } finally {
      await userCtx.close();
    }
  }, ["chat: a message runs the tool and streams the reply", "keys: create a key (shown once)"]);

  await step('audit: every chain verifies, then a forged record is named', async () => {
    await go(page, 'Audit');
    const status = page.getByRole('status').filter({ hasText: /Every link and signature holds|Broken/ });
    await status.waitFor({ timeout: T.start });
    check(/Every link and signature holds/.test(await status.textContent()), `before tampering: ${await status.textContent()}`);
    const rows = page.locator('table.audit-chains tbody tr');
    for (const role of ['config', 'runner', 'gateway']) {
      const row = rows.filter({ has: page.getByRole('cell', { name: role, exact: true }) }).first();
      await row.getByText('Verified').waitFor();
    }
    await shot(page, 'audit');
    await a11y(page, 'Audit');
    // A non-admin key is refused the verification.
    const refused = await fetch(BASE + '/api/v1/audit/verify', { headers: { Authorization: `Bearer ${CALL_KEY}` } });
    check(refused.status === 403, `verify with a call key: ${refused.status}`);
    // A record altered after it was signed, appended to the config chain.
    const res = await fetch(TAMPER_URL, { method: 'POST' });
    check(res.ok, `tampering: ${res.status} ${await res.clone().text()}`);
    const forged = await res.json();
    await page.getByRole('button', { name: 'Verify again' }).click();
    await page.getByRole('status').filter({ hasText: /^Broken/ }).waitFor({ timeout: T.start });
    const bad = page.locator(`table.audit-chains tbody tr[data-chain="${forged.chain}"]`);
    const fault = norm(await bad.locator('td').last().textContent());
    // altered, or bad signature once the config service linked a record to it.
    check(/^(altered|bad signature) at sequence /.test(fault) && fault.includes(`at sequence ${forged.stream_seq} `), `the forged record's row says ${JSON.stringify(fault)}`);
    check(await page.locator('table.audit-chains tbody tr[data-ok="false"]').count() === 1, 'another chain is reported broken');
    await shot(page, 'audit-broken');
    await a11y(page, 'Audit: broken');
  }, ['login with the admin key']);

  await step('no console errors, no request off the origin', async () => {
    await page.waitForTimeout(500);
    check(problems.length === 0, problems.join('\n'));
    problems.length = 0;
  });
} finally {
  const failed = failures.length > 0;
  if (failed) {
    await ctx.tracing.stop({ path: join(ARTIFACTS, 'trace-failure.zip') }).catch(() => {});
  } else {
    await ctx.tracing.stop().catch(() => {});
  }
  await secondCtx?.close().catch(() => {});
  await userCtx?.close().catch(() => {});
  await browser.close().catch(() => {});
}
console.log(`axe-core checked ${a11yRuns.length} page states: ${a11yRuns.join('; ')}`);
console.log(`${passed.length} steps passed, ${failures.length} failed, ${skipped.length} skipped; screenshots in ${ARTIFACTS}`);
if (failures.length) console.error('failed: ' + failures.map((f) => `"${f}"`).join(', '));
process.exit(failures.length || skipped.length ? 1 : 0);
