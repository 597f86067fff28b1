// Helpers of the browser tests: a `kiln serve` of our own (127.0.0.1, an
// ephemeral port, a temporary data directory; its first key read from its
// stdout), the host checks, and headless Chromium (Debian's) through
// puppeteer-core.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import puppeteer from 'puppeteer-core';

export const KILN = process.env.KILN_BIN;
if (!KILN) throw new Error('KILN_BIN is not set (ctest sets it to the kiln binary)');

// Debian's chromium, or $KILN_CHROMIUM.
export function chromiumPath() {
  const candidates = [process.env.KILN_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser'].filter(Boolean);
  return candidates.find((p) => fs.existsSync(p)) || null;
}

export async function launchBrowser() {
  const executablePath = chromiumPath();
  if (!executablePath) throw new Error('chromium is not installed');
  return puppeteer.launch({
    executablePath,
    headless: true,
    // As root Chromium refuses its own sandbox; the pages it loads here are
    // kiln's own, from 127.0.0.1. No network beyond loopback is touched.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--font-render-hinting=none'],
    defaultViewport: { width: 1280, height: 900 },
    timeout: 60000,
  });
}

// Why kiln cannot run sandboxes here, or null (kiln doctor; as tests/mcp).
export function sandboxMissing() {
  const out = execFileSync(KILN, ['doctor', '--json', '--no-smoke'], { timeout: 60000 }).toString();
  const layers = JSON.parse(out).layers;
  const missing = [];
  for (const name of ['user namespace', 'landlock', 'cgroup']) {
    const layer = layers.find((l) => l.name === name);
    if (!layer) throw new Error(`kiln doctor lists no "${name}" layer`);
    if (layer.state === 'missing' && layer.required) missing.push(`${name}: ${layer.detail}`);
  }
  return missing.length ? `kiln doctor: missing on this host: ${missing.join('; ')}` : null;
}

// The modules of `modules` that the sandbox's /usr/bin/python3 cannot import.
export function pythonLacks(...modules) {
  return modules.filter((m) => {
    try {
      execFileSync('/usr/bin/python3', ['-I', '-c', `import ${m}`], { stdio: 'ignore', timeout: 120000 });
      return false;
    } catch {
      return true;
    }
  });
}

// Starts `kiln serve`; resolves to {url, key, stderr(), createKey(tenant), createAdminKey(), stop()}.
export async function startServer() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-web-test-'));
  const dataDir = path.join(dir, 'data');
  const outPath = path.join(dir, 'serve.stdout');
  const errPath = path.join(dir, 'serve.stderr');
  const child = spawn(KILN, ['serve', '--listen', '127.0.0.1:0', '--data-dir', dataDir], {
    stdio: ['ignore', fs.openSync(outPath, 'w'), fs.openSync(errPath, 'w')],
    env: { ...process.env, KILN_LOG: 'info' },
  });
  let exited = null;
  child.on('exit', (code, signal) => { exited = { code, signal }; });
  const read = (p) => (fs.existsSync(p) ? fs.readFileSync(p, 'utf8') : '');
  const deadline = Date.now() + 60000;
  let port = 0;
  while (!port) {
    const m = /kiln: listening on http:\/\/127\.0\.0\.1:(\d+) /.exec(read(errPath));
    if (m) port = Number(m[1]);
    else if (exited) throw new Error(`kiln serve exited (${JSON.stringify(exited)}):\n${read(errPath)}`);
    else if (Date.now() > deadline) throw new Error(`kiln serve did not listen within 60 s:\n${read(errPath)}`);
    else await sleep(20);
  }
  const key = read(outPath).split('\n')[0].trim();
  if (!/^kiln_[0-9a-f]{12}_/.test(key)) throw new Error(`no API key on kiln serve's stdout: ${read(outPath)}`);
  return {
    url: `http://127.0.0.1:${port}`,
    key,
    stderr: () => read(errPath),
    createKey: (tenant) =>
      execFileSync(KILN, ['keys', 'create', '--tenant', tenant, '--data-dir', dataDir]).toString().trim(),
    createAdminKey: () =>
      execFileSync(KILN, ['keys', 'create', '--admin', '--data-dir', dataDir]).toString().trim(),
    async stop() {
      if (!exited) {
        child.kill('SIGTERM');
        for (let i = 0; i < 300 && !exited; ++i) await sleep(50);
        if (!exited) child.kill('SIGKILL');
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
