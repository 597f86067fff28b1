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
    // In-sandbox calls take that sandbox's own token: the other's is refused.
    const res = await fetch(`${server.url}/files?path=x`, {
      headers: { 'E2b-Sandbox-Id': mine.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': theirs.envdAccessToken },
    });
    assert.equal(res.status, 401);
    // Each has a workspace of its own at /home/user.
    await mine.files.write('/home/user/same.txt', 'mine');
    await theirs.files.write('/home/user/same.txt', 'theirs');
    assert.equal(await mine.files.read('/home/user/same.txt'), 'mine');
    assert.equal((await theirs.runCode("open('/home/user/same.txt').read()")).text, "'theirs'");
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
    // The SDK keeps only the status of a 400 (its extractError reads the body
    // of 404 and 502 alone); kiln's body names the variable (the wire test).
    await assert.rejects(sbx.runCode('1', { envs: { LD_PRELOAD: 'x' } }), /400/);
    await assert.rejects(sbx.createCodeContext({ language: 'r' }), /400/);
  });

  test('a second code context: separate state and count, restart empties one only, remove', async () => {
    const sbx = await create();
    await sbx.runCode("x = 'default'");
    const ctx = await sbx.createCodeContext();
    assert.match(ctx.id, /^[0-9a-f]{32}$/);
    assert.equal(ctx.language, 'python');
    await sbx.runCode("x = 'second'", { context: ctx });
    assert.equal((await sbx.runCode('x')).text, "'default'");
    const second = await sbx.runCode('x', { context: ctx });
    assert.equal(second.text, "'second'");
    assert.equal(second.executionCount, 2);
    // State of one is not visible in another.
    const other = await sbx.createCodeContext();
    const missing = await sbx.runCode('x', { context: other });
    assert.equal(missing.error?.name, 'NameError');
    const ids = (await sbx.listCodeContexts()).map((c) => c.id).sort();
    assert.deepEqual(ids, ['default', ctx.id, other.id].sort());
    // Restart empties that context only.
    await sbx.restartCodeContext(ctx);
    assert.equal((await sbx.runCode('x', { context: ctx })).error?.name, 'NameError');
    assert.equal((await sbx.runCode('x')).text, "'default'");
    await sbx.removeCodeContext(other.id);
    assert.deepEqual((await sbx.listCodeContexts()).map((c) => c.id).sort(), ['default', ctx.id].sort());
    await assert.rejects(sbx.runCode('1', { context: other }), /not found/);
  });

  test('runCode with envs: the cell sees them, the next cell does not', async () => {
    const sbx = await create({ envs: { KEPT: 'session' } });
    const code = "import os, subprocess\n(os.environ.get('CELL'), os.environ.get('KEPT'), " +
      "subprocess.run(['/usr/bin/printenv', 'CELL'], capture_output=True, text=True).stdout)";
    const withEnv = await sbx.runCode(code, { envs: { CELL: 'one cell', KEPT: 'overridden' } });
    assert.equal(withEnv.text, "('one cell', 'overridden', 'one cell\\n')");
    assert.equal((await sbx.runCode(code)).text, "(None, 'session', '')");
  });

  test('files: write, read what the code wrote, binary-safe, missing is NotFound', async () => {
    const sbx = await create();
    const info = await sbx.files.write('notes/hello.txt', 'hi from the SDK');
    assert.equal(info.name, 'hello.txt');
    assert.equal(info.path, '/home/user/notes/hello.txt');
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
    assert.ok(deep.some((e) => e.path === '/home/user/notes/hello.txt' && e.type === 'file'));
    assert.deepEqual((await sbx.files.list('notes')).map((e) => e.name), ['hello.txt']);
    await sbx.files.remove('out.bin');
    assert.equal(await sbx.files.exists('out.bin'), false);
    assert.equal((await sbx.runCode("import os; os.path.exists('out.bin')")).text, 'False');
    // Absolute paths outside /home/user (the workspace) are refused with the reason.
    await assert.rejects(sbx.files.write('/etc/x', 'no'), /outside \/home\/user, the sandbox's workspace/);
  });

  test('files.makeDir, rename and remove: parents made, a directory moved and removed whole', async () => {
    const sbx = await create();
    assert.equal(await sbx.files.makeDir('a/b/c'), true);
    // E2B's answer for a directory that exists: false, not an error.
    assert.equal(await sbx.files.makeDir('a/b/c'), false);
    assert.equal((await sbx.runCode("import os; os.path.isdir('a/b/c')")).text, 'True');
    await sbx.files.write('a/b/c/f.txt', 'inside');
    const moved = await sbx.files.rename('a', 'z');
    assert.equal(moved.name, 'z');
    assert.equal(moved.path, '/home/user/z');
    assert.equal(moved.type, 'dir');
    assert.equal(await sbx.files.exists('a'), false);
    assert.equal((await sbx.runCode("open('z/b/c/f.txt').read()")).text, "'inside'");
    // A file to a new name in a directory that does not exist yet.
    const file = await sbx.files.rename('z/b/c/f.txt', 'moved/here.txt');
    assert.deepEqual([file.name, file.type, file.size], ['here.txt', 'file', 'inside'.length]);
    assert.equal(await sbx.files.read('moved/here.txt'), 'inside');
    await assert.rejects(sbx.files.rename('no-such', 'x'), (err) => {
      assert.equal(err.name, 'FileNotFoundError', `${err.name}: ${err.message}`);
      return true;
    });
    // What rename(2) refuses is refused, with the kernel's reason.
    await assert.rejects(sbx.files.rename('z', 'z/b/inside'), /failed_precondition\] cannot move 'z' to 'z\/b\/inside'/);
    // remove takes a directory with everything in it (envd's os.RemoveAll).
    await sbx.files.write('z/b/deep.txt', 'x');
    await sbx.files.remove('z');
    assert.equal(await sbx.files.exists('z'), false);
    assert.equal((await sbx.runCode("import os; os.path.exists('z')")).text, 'False');
    await assert.rejects(sbx.files.remove('z'), (err) => err.name === 'FileNotFoundError');
  });

  test('files.makeDir, rename and remove stay in the workspace: .., links and absolute paths refused', async () => {
    const sbx = await create();
    await sbx.files.write('mine.txt', 'mine');
    const refused = (re) => (err) => {
      assert.equal(err.name, 'InvalidArgumentError', `${err.name}: ${err.message}`);
      assert.match(err.message, re);
      return true;
    };
    await assert.rejects(sbx.files.makeDir('../escape'), refused(/'\.\.'/));
    await assert.rejects(sbx.files.rename('mine.txt', '../../tmp/stolen'), refused(/'\.\.'/));
    await assert.rejects(sbx.files.rename('a/../../x', 'y'), refused(/'\.\.'/));
    await assert.rejects(sbx.files.remove('..'), refused(/'\.\.'/));
    await assert.rejects(sbx.files.remove('/etc/hostname'), refused(/workspace/));
    await assert.rejects(sbx.files.rename('/etc/hostname', 'h'), refused(/workspace/));
    await assert.rejects(sbx.files.makeDir('/tmp/outside'), refused(/workspace/));
    // The code makes links out of the workspace; the host never follows them.
    await sbx.runCode("import os\nos.symlink('/tmp', 'tmp-link')\nos.makedirs('/tmp/target', exist_ok=True)\nopen('/tmp/target/keep.txt', 'w').write('kept')");
    await assert.rejects(sbx.files.makeDir('tmp-link/x'), refused(/symlink/));
    await assert.rejects(sbx.files.rename('tmp-link/target/keep.txt', 'stolen.txt'), refused(/symlink/));
    await assert.rejects(sbx.files.rename('mine.txt', 'tmp-link/mine.txt'), refused(/symlink/));
    await assert.rejects(sbx.files.remove('tmp-link/target'), refused(/symlink/));
    // Renaming or removing the link itself touches the link only.
    const link = await sbx.files.rename('tmp-link', 'renamed-link');
    assert.equal(link.type, 'symlink');
    await sbx.files.remove('renamed-link');
    const seen = await sbx.runCode(
      "(os.path.lexists('renamed-link'), open('/tmp/target/keep.txt').read(), os.path.exists('/tmp/outside'), open('mine.txt').read())",
    );
    assert.equal(seen.text, "(False, 'kept', False, 'mine')");
    // The workspace itself is neither removed nor moved.
    await assert.rejects(sbx.files.remove('.'), refused(/workspace itself/));
    await assert.rejects(sbx.files.rename('.', 'elsewhere'), refused(/workspace itself/));
  });

  test("the workspace is E2B's /home/user: absolute paths, the code's and the command's cwd", async () => {
    const sbx = await create();
    const info = await sbx.files.write('/home/user/a.txt', 'at home');
    assert.deepEqual([info.name, info.path], ['a.txt', '/home/user/a.txt']);
    const code = await sbx.runCode("import os\n(open('/home/user/a.txt').read(), os.getcwd(), open('a.txt').read())");
    assert.equal(code.text, "('at home', '/home/user', 'at home')");
    const pwd = await sbx.commands.run('pwd; cat /home/user/a.txt');
    assert.equal(pwd.stdout, '/home/user\nat home');
    // Relative and absolute name the same file, for every files call.
    assert.equal(await sbx.files.read('/home/user/a.txt'), 'at home');
    assert.equal(await sbx.files.read('a.txt'), 'at home');
    assert.equal(await sbx.files.exists('/home/user/a.txt'), true);
    assert.equal(await sbx.files.makeDir('/home/user/d/e'), true);
    const moved = await sbx.files.rename('/home/user/a.txt', '/home/user/d/e/b.txt');
    assert.equal(moved.path, '/home/user/d/e/b.txt');
    assert.deepEqual((await sbx.files.list('/home/user')).map((e) => [e.name, e.path]), [['d', '/home/user/d']]);
    assert.deepEqual((await sbx.files.list('/home/user/d/e')).map((e) => e.path), ['/home/user/d/e/b.txt']);
    const home = await sbx.files.getInfo('/home/user');
    assert.deepEqual([home.name, home.type, home.path], ['user', 'dir', '/home/user']);
    // What the code writes at /home/user is the workspace's: listed, read.
    await sbx.runCode("open('/home/user/by-code.csv', 'w').write('a,b\\n1,2\\n')");
    assert.equal(await sbx.files.read('by-code.csv'), 'a,b\n1,2\n');
    await sbx.files.remove('/home/user/d');
    assert.equal((await sbx.runCode("os.path.exists('/home/user/d')")).text, 'False');
    // A cell's own chdir lasts, as in a notebook; a command still starts at home.
    await sbx.runCode("os.chdir('/tmp')");
    assert.equal((await sbx.runCode('os.getcwd()')).text, "'/tmp'");
    assert.equal((await sbx.commands.run('pwd')).stdout, '/home/user\n');
    // The contexts say where they run; another cwd is refused with the reason.
    assert.equal((await sbx.createCodeContext()).cwd, '/home/user');
    await assert.rejects(sbx.createCodeContext({ cwd: '/tmp' }), /400/);
    // A name that only starts like /home/user is outside the workspace.
    const homeDir = '/home/user';
    await assert.rejects(sbx.files.write(`${homeDir}data/x`, 'no'), /outside \/home\/user/);
    await assert.rejects(sbx.files.write('/home', 'no'), /outside \/home\/user/);
    await assert.rejects(sbx.files.read('/home/user/../../etc/passwd'), /'\.\.'/);
  });

  test('what needs wildcard DNS: getHost names a host kiln cannot serve, signed URLs are refused saying why', async () => {
    const sbx = await create();
    // getHost is the SDK's own computation (PORT-ID.DOMAIN): no request is made.
    assert.match(sbx.getHost(8080), new RegExp(`^8080-${sbx.sandboxId}\\.`));
    await sbx.files.write('/home/user/dl.txt', 'x');
    // With E2B_SANDBOX_URL the signed URL is kiln's /files with a signature and no sandbox id.
    const download = await sbx.downloadUrl('/home/user/dl.txt');
    assert.match(download, /\/files\?.*signature=/);
    let res = await fetch(download);
    assert.equal(res.status, 501);
    let body = await res.json();
    assert.equal(body.code, 501);
    assert.match(body.message, /wildcard DNS/);
    res = await fetch(await sbx.uploadUrl('/home/user/up.txt'), { method: 'POST', body: new FormData() });
    assert.equal(res.status, 501);
    assert.match((await res.json()).message, /downloadUrl, uploadUrl/);
    assert.equal(await sbx.files.exists('/home/user/up.txt'), false);
  });

  test("commands.run('ls; echo err >&2'): exit code and both streams, from the sandbox", async () => {
    const sbx = await create();
    await sbx.files.write('seen-by-ls.txt', 'x');
    const r = await sbx.commands.run('ls; echo err >&2');
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'seen-by-ls.txt\n');
    assert.equal(r.stderr, 'err\n');
    // A command sees what the code wrote, and the code what the command wrote.
    await sbx.runCode("open('from-code.txt', 'w').write('by runCode')");
    assert.equal((await sbx.commands.run('cat from-code.txt')).stdout, 'by runCode');
    await sbx.commands.run('echo by-bash > from-bash.txt');
    assert.equal((await sbx.runCode("open('from-bash.txt').read()")).text, "'by-bash\\n'");
    // A command is not a cell of the interpreter: only the two runCode calls counted.
    assert.equal((await sbx.runCode('1')).executionCount, 3);
  });

  test('a failing command is a CommandExitError with its exit code and output', async () => {
    const sbx = await create();
    await assert.rejects(sbx.commands.run('echo partial; echo why >&2; exit 3'), (err) => {
      assert.equal(err.name, 'CommandExitError', `${err.name}: ${err.message}`);
      assert.equal(err.exitCode, 3);
      assert.equal(err.stdout, 'partial\n');
      assert.equal(err.stderr, 'why\n');
      return true;
    });
    // A program that cannot start is an error of the call, not an exit code.
    await assert.rejects(sbx.commands.run('true', { cwd: '/no/such/dir' }), /FileNotFoundError|no\/such/);
    // The sandbox goes on.
    assert.equal((await sbx.commands.run('echo still here')).stdout, 'still here\n');
  });

  test('commands: envs, cwd, onStdout/onStderr as output is produced, a login shell', async () => {
    const sbx = await create({ envs: { FROM_SANDBOX: 'sbx' } });
    const events = [];
    const started = Date.now();
    const r = await sbx.commands.run(
      'echo "$GREETING $FROM_SANDBOX $(pwd)"; sleep 1.5; echo late >&2; shopt -q login_shell && echo login',
      {
        envs: { GREETING: 'hi' },
        cwd: '/tmp',
        onStdout: (d) => events.push(['stdout', d, Date.now() - started]),
        onStderr: (d) => events.push(['stderr', d, Date.now() - started]),
      },
    );
    assert.equal(r.stdout, 'hi sbx /tmp\nlogin\n');
    // Each stream in order (two pipes: no order between them).
    assert.deepEqual(events.filter((e) => e[0] === 'stdout').map((e) => e[1]), ['hi sbx /tmp\n', 'login\n']);
    assert.deepEqual(events.filter((e) => e[0] === 'stderr').map((e) => e[1]), ['late\n']);
    const total = Date.now() - started;
    assert.ok(events[0][2] < total - 1000, `stdout at ${events[0][2]} ms of ${total} ms`);
    // kiln's own names are refused, naming the variable, as for the session's env.
    await assert.rejects(sbx.commands.run('true', { envs: { LD_PRELOAD: 'x' } }), /process\.envs\.LD_PRELOAD/);
  });

  test('a background command: listed, killed, and stdin is refused with the reason', async () => {
    const sbx = await create();
    const handle = await sbx.commands.run('echo started; sleep 60', { background: true });
    assert.ok(Number.isInteger(handle.pid) && handle.pid > 0, `pid ${handle.pid}`);
    const listed = await sbx.commands.list();
    assert.deepEqual(listed.map((p) => [p.pid, p.cmd, p.args]), [[handle.pid, '/bin/bash', ['-l', '-c', 'echo started; sleep 60']]]);
    await assert.rejects(sbx.commands.sendStdin(handle.pid, 'x'), /stdin/);
    assert.equal(await sbx.commands.kill(handle.pid + 1000), false);
    assert.equal(await handle.kill(), true);
    await assert.rejects(handle.wait(), (err) => {
      assert.equal(err.name, 'CommandExitError', `${err.name}: ${err.message}`);
      assert.equal(err.stdout, 'started\n');
      return true;
    });
    assert.deepEqual(await sbx.commands.list(), []);
    // The sandbox (and its interpreter state) goes on.
    assert.equal((await sbx.commands.run('echo after')).stdout, 'after\n');
  });

  test('a command is in the jail: no new privileges, seccomp, no network, read-only root', async () => {
    const sbx = await create();
    const status = (await sbx.commands.run('cat /proc/self/status')).stdout;
    assert.match(status, /^NoNewPrivs:\s+1$/m);
    assert.match(status, /^Seccomp:\s+2$/m);
    // The same uid as the code's, not root.
    const uid = (await sbx.runCode('import os; os.getuid()')).text;
    assert.match(status, new RegExp(`^Uid:\\s+${uid}\\s`, 'm'));
    assert.notEqual(uid, '0');
    const net = await sbx.commands.run('(echo > /dev/tcp/1.1.1.1/53) 2>/dev/null && echo connected || echo refused');
    assert.equal(net.stdout, 'refused\n');
    await assert.rejects(sbx.commands.run('touch /usr/kiln-e2b-probe'), (err) => {
      assert.equal(err.name, 'CommandExitError');
      assert.match(err.stderr, /Read-only file system/);
      return true;
    });
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
    // A cell's env_vars are checked as the session's: kiln's names refused, named.
    const inSandbox = { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken };
    res = await fetch(`${server.url}/execute`, {
      method: 'POST',
      headers: { ...inSandbox, 'E2b-Sandbox-Port': '49999', 'Content-Type': 'application/json' },
      body: JSON.stringify({ code: '1', env_vars: { LD_PRELOAD: 'x' } }),
    });
    assert.equal(res.status, 400);
    assert.match((await res.json()).message, /env_vars\.LD_PRELOAD/);
    // process.Process/Start is Connect streaming: envelopes in, envelopes out;
    // a body that is not one is an end-of-stream error (flag 0x02), HTTP 200.
    const start = (body) => fetch(`${server.url}/process.Process/Start`, {
      method: 'POST',
      headers: { ...inSandbox, 'E2b-Sandbox-Port': '49983', 'Content-Type': 'application/connect+json' },
      body,
    });
    const envelopes = (buf) => {
      const out = [];
      for (let i = 0; i < buf.length;) {
        const n = buf.readUInt32BE(i + 1);
        out.push([buf[i], JSON.parse(buf.subarray(i + 5, i + 5 + n).toString())]);
        i += 5 + n;
      }
      return out;
    };
    const envelope = (obj) => {
      const msg = Buffer.from(JSON.stringify(obj));
      const head = Buffer.alloc(5);
      head.writeUInt32BE(msg.length, 1);
      return Buffer.concat([head, msg]);
    };
    res = await start(Buffer.from([0, 0, 0, 0, 9, 0x7b]));
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'application/connect+json');
    let got = envelopes(Buffer.from(await res.arrayBuffer()));
    assert.deepEqual(got.map((e) => e[0]), [2]);
    assert.equal(got[0][1].error.code, 'invalid_argument');
    assert.match(got[0][1].error.message, /cut short/);
    res = await start(envelope({ process: { cmd: '/bin/bash', args: ['-c', 'printf hi; exit 4'] } }));
    got = envelopes(Buffer.from(await res.arrayBuffer()));
    assert.deepEqual(got.map((e) => [e[0], Object.keys(e[1].event ?? {})[0]]),
      [[0, 'start'], [0, 'data'], [0, 'end'], [2, undefined]]);
    assert.equal(Buffer.from(got[1][1].event.data.stdout, 'base64').toString(), 'hi');
    assert.equal(got[2][1].event.end.exitCode, 4);
    assert.deepEqual(got[3][1], {});
  });

  test('a wrong key is refused in E2B\'s error shape', async () => {
    await assert.rejects(Sandbox.create({ apiKey: 'kiln_000000000000_nope' }), (err) => {
      assert.match(String(err.message), /valid kiln API key/);
      return true;
    });
  });
});
