// kiln serve through the official, unchanged E2B JavaScript SDKs
// (@e2b/code-interpreter and e2b, pinned in package-lock.json): the SDK is
// pointed at a `kiln serve` of our own by E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY alone, as docs/e2b.md tells a user to.
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, test } from 'node:test';

import { Sandbox } from '@e2b/code-interpreter';

import { pythonLacks, startServer } from './harness.mjs';

// run.sh skips (exit 77) on a host that cannot run kiln's sandboxes (check.mjs).
describe('E2B SDK against kiln serve', () => {
  let server;
  const sandboxes = [];
  async function create(opts) {
    const sbx = await Sandbox.create(opts);
    sandboxes.push(sbx);
    return sbx;
  }

  before(async () => {
    server = await startServer();
    process.env.E2B_API_URL = server.url;
    process.env.E2B_SANDBOX_URL = server.url;
    process.env.E2B_API_KEY = server.key;
  });
  // Each test's sandboxes end with it (a tenant has at most 8 live sessions).
  afterEach(async () => {
    for (const s of sandboxes.splice(0)) await s.kill().catch(() => {});
  });
  after(async () => {
    if (server) await server.stop();
  });

  test("the SDK README's example: state persists between runCode calls", async () => {
    const sbx = await create();
    assert.match(sbx.sandboxId, /^[0-9a-f]{32}$/);
    await sbx.runCode('x = 1');
    const execution = await sbx.runCode('x+=1; x');
    assert.equal(execution.text, '2');
    assert.equal(execution.error, undefined);
    assert.equal(execution.executionCount, 2);
  });

  test('runCode callbacks get stdout, stderr, results and errors as they are produced', async () => {
    const sbx = await create();
    const events = [];
    const started = Date.now();
    const execution = await sbx.runCode(
      [
        'import sys, time',
        "print('first', flush=True)",
        'time.sleep(1.5)',
        "print('oops', file=sys.stderr, flush=True)",
        '40 + 2',
      ].join('\n'),
      {
        onStdout: (m) => events.push(['stdout', m.line, Date.now() - started]),
        onStderr: (m) => events.push(['stderr', m.line, Date.now() - started]),
        onResult: (r) => events.push(['result', r.text, Date.now() - started]),
        onError: (e) => events.push(['error', e.name, Date.now() - started]),
      },
    );
    const kinds = events.map((e) => [e[0], e[1]]);
    assert.deepEqual(kinds, [
      ['stdout', 'first\n'],
      ['stderr', 'oops\n'],
      ['result', '42'],
    ]);
    // The first line came before the sleep ended: streamed, not buffered.
    const total = Date.now() - started;
    assert.ok(events[0][2] < total - 1000, `stdout at ${events[0][2]} ms of ${total} ms`);
    assert.deepEqual(execution.logs.stdout, ['first\n']);
    assert.deepEqual(execution.logs.stderr, ['oops\n']);
    assert.equal(execution.results.length, 1);
    assert.equal(execution.results[0].isMainResult, true);
  });

  test('1/0 is an error event: name, value, traceback', async () => {
    const sbx = await create();
    const seen = [];
    const execution = await sbx.runCode('1/0', { onError: (e) => seen.push(e) });
    assert.ok(execution.error);
    assert.equal(execution.error.name, 'ZeroDivisionError');
    assert.equal(execution.error.value, 'division by zero');
    assert.equal(typeof execution.error.traceback, 'string');
    assert.match(execution.error.traceback, /ZeroDivisionError/);
    assert.equal(seen.length, 1);
    assert.equal(seen[0].name, 'ZeroDivisionError');
    // The sandbox is still there: state kept.
    const after = await sbx.runCode('"still " + "here"');
    assert.equal(after.text, "'still here'");
  });

  test('a matplotlib figure is a PNG result', { skip: pythonLacks('matplotlib') }, async () => {
    const sbx = await create();
    const execution = await sbx.runCode(
      [
        'import matplotlib',
        "matplotlib.use('Agg')",
        'import matplotlib.pyplot as plt',
        'plt.plot([1, 2, 3], [1, 4, 9])',
        'plt.show()',
      ].join('\n'),
    );
    assert.equal(execution.error, undefined, JSON.stringify(execution.error));
    const png = execution.results.find((r) => r.png);
    assert.ok(png, `no png among ${JSON.stringify(execution.results.map((r) => r.formats()))}`);
    assert.equal(png.isMainResult, false);
    const bytes = Buffer.from(png.png, 'base64');
    assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    assert.ok(png.formats().includes('png'));
  });

  test('a DataFrame is the main result, with text and html', { skip: pythonLacks('pandas') }, async () => {
    const sbx = await create();
    const execution = await sbx.runCode(
      "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})",
    );
    assert.equal(execution.error, undefined, JSON.stringify(execution.error));
    const main = execution.results.find((r) => r.isMainResult);
    assert.ok(main);
    assert.match(main.text, /a\s+b/);
    assert.match(main.html, /<table/);
    assert.ok(main.formats().includes('html'));
  });

  test('getInfo, setTimeout, connect keeping state, isRunning, kill then kill again', async () => {
    const sbx = await create({ metadata: { purpose: 'kiln-test' }, timeoutMs: 120_000 });
    const info = await sbx.getInfo();
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.equal(info.templateId, 'code-interpreter-v1');
    assert.deepEqual(info.metadata, { purpose: 'kiln-test' });
    const life = info.endAt.getTime() - info.startedAt.getTime();
    assert.ok(Math.abs(life - 120_000) < 5_000, `endAt - startedAt = ${life} ms`);

    await sbx.setTimeout(600_000);
    const later = await sbx.getInfo();
    assert.ok(later.endAt.getTime() - Date.now() > 590_000, `endAt ${later.endAt.toISOString()}`);
    // Beyond server.session_max_lifetime (1 h by default): refused, not clamped.
    await assert.rejects(sbx.setTimeout(10 * 3600_000), /timeout/);

    await sbx.runCode('kept = 41');
    const again = await Sandbox.connect(sbx.sandboxId);
    assert.equal((await again.runCode('kept + 1')).text, '42');

    assert.equal(await sbx.isRunning(), true);
    assert.equal(await sbx.kill(), true);
    assert.equal(await sbx.kill(), false);
    assert.equal(await sbx.isRunning(), false);
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId), /not found/);
  });

  test("two tenants' sandboxes are invisible to each other", async () => {
    const otherKey = server.createKey('tenant-b');
    const mine = await create();
    const theirs = await create({ apiKey: otherKey });
    await assert.rejects(Sandbox.getInfo(mine.sandboxId, { apiKey: otherKey }), /not found/);
    await assert.rejects(Sandbox.connect(mine.sandboxId, { apiKey: otherKey }), /not found/);
    assert.equal(await Sandbox.kill(mine.sandboxId, { apiKey: otherKey }), false);
    assert.equal(await Sandbox.kill(theirs.sandboxId), false);
    // Both still run.
    assert.equal((await mine.runCode('1 + 1')).text, '2');
    assert.equal((await theirs.runCode('2 + 2')).text, '4');
  });

  test("a quarantined tenant's key is refused on E2B's API too, and its sandboxes end", async () => {
    const tenantKey = server.createKey('tenant-q');
    const admin = server.createAdminKey();
    const sbx = await create({ apiKey: tenantKey });
    assert.equal((await sbx.runCode('1 + 1')).text, '2');
    const post = (path) =>
      fetch(`${server.url}${path}`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${admin}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ reason: 'e2b test' }),
      });
    assert.equal((await post('/v1/admin/tenants/tenant-q/quarantine')).status, 200);
    // E2B's error shape, with kiln's reason (docs/api.md, "Operator controls").
    const raw = await fetch(`${server.url}/v2/sandboxes`, {
      method: 'POST',
      headers: { 'X-API-KEY': tenantKey, 'Content-Type': 'application/json' },
      body: JSON.stringify({ templateID: 'default' }),
    });
    assert.equal(raw.status, 403);
    const body = await raw.json();
    assert.equal(body.code, 403);
    assert.match(body.message, /quarantined: e2b test/);
    await assert.rejects(Sandbox.create({ apiKey: tenantKey }), /quarantined/);
    // Its running sandbox was stopped.
    assert.equal(await sbx.isRunning(), false);
    assert.equal((await post('/v1/admin/tenants/tenant-q/release')).status, 200);
    const again = await create({ apiKey: tenantKey });
    assert.equal((await again.runCode('3 * 3')).text, '9');
  });

  test("the output audit covers E2B's results: the server's own key is redacted", async () => {
    const sbx = await create();
    const key = server.key;
    // Printed in two flushed halves, and as the cell's value.
    const execution = await sbx.runCode(
      `import sys\nk = ${JSON.stringify(key)}\nprint(k[:20], end='', flush=True)\nprint(k[20:], flush=True)\nk`,
    );
    const seen = execution.logs.stdout.join('') + (execution.text ?? '');
    assert.ok(!seen.includes(key), `the key left the server: ${seen}`);
    assert.match(seen, /\[REDACTED:kiln_api_key\]/);
  });

  test("create with envs: the sandbox's environment, for its life", async () => {
    const sbx = await create({ envs: { GREETING: 'hello from envs' } });
    const seen = await sbx.runCode("import os\nos.environ['GREETING']");
    assert.equal(seen.text, "'hello from envs'");
    const child = await sbx.runCode(
      "import subprocess\nsubprocess.run(['/usr/bin/printenv', 'GREETING'], capture_output=True, text=True).stdout",
    );
    assert.equal(child.text, "'hello from envs\\n'");
  });

  test('what kiln does not support yet is refused with the reason', async () => {
    await assert.rejects(Sandbox.create({ envs: { LD_PRELOAD: 'x' } }), /envVars\.LD_PRELOAD/);
    await assert.rejects(Sandbox.create('no-such-template'), /no kiln profile/);
    const sbx = await create();
    // The SDK keeps only the status of a 501 (its extractError reads the body
    // of 404 and 502 alone); kiln's body says why (docs/e2b.md).
    await assert.rejects(sbx.createCodeContext(), /501/);
    await assert.rejects(sbx.runCode('1', { envs: { A: 'b' } }), /env_vars|400/);
  });

  test('files: write, read what the code wrote, binary-safe, missing is NotFound', async () => {
    const sbx = await create();
    const info = await sbx.files.write('notes/hello.txt', 'hi from the SDK');
    assert.equal(info.name, 'hello.txt');
    assert.equal(info.path, 'notes/hello.txt');
    const seen = await sbx.runCode("open('notes/hello.txt').read()");
    assert.equal(seen.text, "'hi from the SDK'");
    await sbx.runCode("open('out.bin', 'wb').write(bytes(range(256)))");
    const bytes = await sbx.files.read('out.bin', { format: 'bytes' });
    assert.deepEqual([...bytes], [...Array(256).keys()]);
    assert.equal(await sbx.files.read('notes/hello.txt'), 'hi from the SDK');
    await assert.rejects(sbx.files.read('no-such-file'), (err) => {
      assert.equal(err.name, 'FileNotFoundError', `${err.name}: ${err.message}`);
      return true;
    });
    // files.exists, files.getInfo and files.list (Connect RPC Stat and ListDir).
    assert.equal(await sbx.files.exists('notes/hello.txt'), true);
    assert.equal(await sbx.files.exists('notes/nope.txt'), false);
    const stat = await sbx.files.getInfo('notes/hello.txt');
    assert.equal(stat.type, 'file');
    assert.equal(stat.size, 'hi from the SDK'.length);
    const top = await sbx.files.list('.');
    assert.deepEqual(
      top.map((e) => [e.name, e.type]).sort(),
      [['notes', 'dir'], ['out.bin', 'file']],
    );
    const deep = await sbx.files.list('.', { depth: 2 });
    assert.ok(deep.some((e) => e.path === 'notes/hello.txt' && e.type === 'file'));
    assert.deepEqual((await sbx.files.list('notes')).map((e) => e.name), ['hello.txt']);
    await sbx.files.remove('out.bin');
    assert.equal(await sbx.files.exists('out.bin'), false);
    assert.equal((await sbx.runCode("import os; os.path.exists('out.bin')")).text, 'False');
    // Absolute paths are not mapped yet (docs/e2b.md): refused with the reason.
    await assert.rejects(sbx.files.write('/etc/x', 'no'), /relative to the workspace/);
  });

  test('the sandbox is the kiln jail: no network, read-only root', async () => {
    const sbx = await create();
    const execution = await sbx.runCode(
      [
        'import socket',
        'try:',
        "    socket.create_connection(('1.1.1.1', 53), timeout=2); net = 'connected'",
        'except OSError as e:',
        "    net = 'refused'",
        'try:',
        "    open('/usr/kiln-e2b-probe', 'w'); root = 'writable'",
        'except OSError as e:',
        "    root = 'read-only'",
        'net, root',
      ].join('\n'),
    );
    assert.equal(execution.error, undefined, JSON.stringify(execution.error));
    assert.equal(execution.text, "('refused', 'read-only')");
  });

  test('the wire: E2B error bodies, tokens, and the reference POST /execute beside E2B\'s', async () => {
    const sbx = await create();
    const api = (method, path, headers = {}) =>
      fetch(`${server.url}${path}`, { method, headers: { 'X-API-KEY': server.key, ...headers } });
    let res = await api('DELETE', '/sandboxes/0123456789abcdef0123456789abcdef');
    assert.equal(res.status, 404);
    assert.deepEqual(await res.json(), {
      code: 404,
      message: 'sandbox 0123456789abcdef0123456789abcdef not found',
    });
    res = await fetch(`${server.url}/v2/sandboxes`, { method: 'POST', body: '{}' });
    assert.equal(res.status, 401);
    assert.equal((await res.json()).code, 401);
    const execute = (headers) =>
      fetch(`${server.url}/execute`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...headers },
        body: JSON.stringify({ code: 'print(1)' }),
      });
    // The sandbox's access token is required; the kiln key is not it.
    res = await execute({ 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'X-Access-Token': server.key });
    assert.equal(res.status, 401);
    res = await execute({ 'E2b-Sandbox-Id': 'nope', 'E2b-Sandbox-Port': '49999' });
    assert.equal(res.status, 502);
    res = await execute({ 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'X-Access-Token': sbx.envdAccessToken });
    assert.equal(res.status, 200);
    const lines = (await res.text()).trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(lines.map((l) => l.type), ['stdout', 'number_of_executions', 'end_of_execution']);
    assert.equal(lines[0].text, '1\n');
    // Without the E2B headers, POST /execute is the reference design's route.
    res = await execute({ 'X-API-Key': server.key });
    assert.equal(res.status, 200);
    const ref = await res.json();
    assert.equal(ref.stdout, '1\n');
    assert.equal(ref.exit_code, 0);
  });

  test('a wrong key is refused in E2B\'s error shape', async () => {
    await assert.rejects(Sandbox.create({ apiKey: 'kiln_000000000000_nope' }), (err) => {
      assert.match(String(err.message), /valid kiln API key/);
      return true;
    });
  });
});
