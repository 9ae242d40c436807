// What an install will run, read from the draft config it saves: anyone can
// publish a registry entry, so the install screen shows the whole command
// line (runtime and package arguments), every environment variable and
// header (the values of the non-secret ones), the URL and the config object
// before Save — the same as `mcpbus add` prints. Everything is revealed
// (text.ts) and quoted where a word would not read as one.
import type { McpConfig } from './api';
import { reveal } from './text';

export interface RunItem {
  label: string;
  text: string;
}

interface PlanCredentialLike {
  kind: string;
  name: string;
}

/** word quotes a command-line word that is empty or holds anything but plain characters. */
export function word(s: string): string {
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(s)) return s;
  return reveal(JSON.stringify(s));
}

/** commandLine is what the runner executes for cfg (see services/runner/internal/launch), '' for a remote. */
export function commandLine(cfg: McpConfig): string {
  const p = cfg.package;
  if (!p || p.type === 'http' || cfg.transport.type === 'http') return '';
  let w: string[];
  if (p.type === 'npm') w = ['npx', '-y', ...(p.runtime_args ?? []), p.identifier];
  else if (p.type === 'docker') {
    w = ['docker', 'run', '--rm', '-i'];
    for (const k of Object.keys(cfg.env_vars ?? {}).sort()) w.push('-e', k);
    w.push(...(p.runtime_args ?? []), p.identifier);
  } else w = [p.identifier];
  w.push(...(p.args ?? []));
  return w.map(word).join(' ');
}

/** whatRuns lists what saving cfg will run; credentials name the plan's secret headers. */
export function whatRuns(cfg: McpConfig, credentials: PlanCredentialLike[] = []): RunItem[] {
  const out: RunItem[] = [];
  const cmd = commandLine(cfg);
  if (cmd) out.push({ label: 'Command', text: cmd });
  else out.push({ label: 'URL', text: word(cfg.transport.url ?? cfg.package?.identifier ?? '') });
  const env = cfg.env_vars ?? {};
  for (const k of Object.keys(env).sort()) {
    const v = env[k];
    const secret = v.is_secret || !!v.secret_ref || !!v.keyfile_path;
    out.push({ label: 'Environment', text: `${word(k)}=${secret ? '(secret)' : word(v.value ?? '')}` });
  }
  const headers = new Map<string, string | null>();
  for (const [k, v] of Object.entries(cfg.transport.headers ?? {})) headers.set(k, v);
  for (const k of cfg.transport.secret_headers ?? []) headers.set(k, null);
  for (const c of credentials) if (c.kind === 'header') headers.set(c.name, null);
  for (const k of [...headers.keys()].sort()) {
    const v = headers.get(k);
    out.push({ label: 'Header', text: `${word(k)}: ${v === null || v === undefined ? '(secret)' : word(v)}` });
  }
  if (cfg.config !== undefined && cfg.config !== null) out.push({ label: 'Config', text: reveal(JSON.stringify(cfg.config)) });
  return out;
}

/** runKey is a comparable form of whatRuns: when it changes, the user must see it again. */
export function runKey(items: RunItem[]): string {
  return JSON.stringify(items);
}
