// Helpers of the E2B SDK tests: a `kiln serve` of our own (127.0.0.1, an
// ephemeral port, a temporary data directory; its first key read from its
// stdout) and the host checks (as tests/mcp/harness.mjs).
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export const KILN = process.env.KILN_BIN;
if (!KILN) throw new Error('KILN_BIN is not set (ctest sets it to the kiln binary)');

// Why kiln cannot run sandboxes here, or null: kiln doctor says user
// namespaces or Landlock (which kiln's default policy requires) are missing,
// or, as root, cgroups (required there). A broken doctor throws: it must fail
// the test, not skip it. (The gtest tiers cross-check each of these verdicts
// with their own probe of the host, tests/testlib/host_facts.h.)
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

// The interpreter kiln's profiles run (kiln.toml), probed bare on the host.
const HOST_PYTHON = '/usr/bin/python3';

// A skip reason when HOST_PYTHON cannot import one of `modules`, else false
// (for node:test's { skip }).
export function pythonLacks(...modules) {
  const missing = modules.filter((m) => {
    try {
      execFileSync(HOST_PYTHON, ['-I', '-c', `import ${m}`], { stdio: 'ignore', timeout: 120000 });
      return false;
    } catch {
      return true;
    }
  });
  if (!missing.length) return false;
  const packages = missing.map((m) => `python3-${m === 'PIL' ? 'pil' : m}`).join(' ');
  return `${HOST_PYTHON} cannot import ${missing.join(', ')} on this host (Debian: ${packages}, which \`make deps\` installs)`;
}

// Starts `kiln serve`; resolves to {url, port, key, dataDir, createKey(tenant), createAdminKey(),
// stderr(), stop()}.
export async function startServer() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-e2b-sdk-'));
  const dataDir = path.join(dir, 'data');
  const outPath = path.join(dir, 'serve.stdout');
  const errPath = path.join(dir, 'serve.stderr');
  // The repository's kiln.toml (the built-in configuration, copied here by
  // setup.sh), with a request rate that the tests' bursts of file calls do not
  // reach (10/s, burst 20 by default), as tests/integration's configurations.
  const configPath = path.join(dir, 'kiln.toml');
  const builtIn = fs.readFileSync(new URL('./kiln.toml', import.meta.url), 'utf8');
  const config = builtIn.replace(/^rate = 10\b/m, 'rate = 1000').replace(/^burst = 20\b/m, 'burst = 1000');
  if (config.match(/^(rate|burst) = 1000\b/gm)?.length !== 2)
    throw new Error('kiln.toml has no [tenants.default] rate = 10 and burst = 20 to raise');
  fs.writeFileSync(configPath, config);
  const child = spawn(KILN, ['serve', '--listen', '127.0.0.1:0', '--data-dir', dataDir, '--config', configPath], {
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
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    port,
    key,
    dataDir,
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
