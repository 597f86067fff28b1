// kiln's MCP server as the official MCP TypeScript SDK client sees it, over
// the transport named by $KILN_MCP_TRANSPORT (stdio_local, stdio_url, http):
// the handshake, the tool list, state kept between calls, a matplotlib plot
// as an image block, isError on an exception, progress, files, reset,
// argument errors, and cancelling a long cell.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { connect, pythonLacks, startServer, textOf } from './harness.mjs';

const kind = process.env.KILN_MCP_TRANSPORT;
let server = null;
let session = null;
let client = null;

before(async () => {
  if (kind !== 'stdio_local') server = await startServer();
  session = await connect(kind, server);
  client = session.client;
});

after(async () => {
  if (session) await session.close();
  if (server) await server.stop();
});

// For assertion messages: what the server said on stderr.
const logs = () => `\n--- kiln mcp stderr ---\n${session?.stderr() ?? ''}\n--- kiln serve stderr ---\n${server?.stderr().slice(-4000) ?? ''}`;

const run = (code, options) => client.callTool({ name: 'run_python', arguments: { code } }, undefined, options);

test('the handshake names kiln and offers tools', () => {
  assert.equal(client.getServerVersion().name, 'kiln');
  assert.ok(client.getServerCapabilities().tools, 'no tools capability');
  assert.match(client.getInstructions() ?? '', /sandbox/);
  if (kind === 'http') {
    assert.equal(session.transport.protocolVersion, '2025-11-25');
    assert.match(session.transport.sessionId, /^[0-9a-f]{64}$/);
  }
});

test('tools/list: five tools with input schemas, output schemas and model-facing descriptions', async () => {
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.deepEqual(Object.keys(byName).sort(), ['download_file', 'list_files', 'reset', 'run_python', 'upload_file']);
  for (const t of tools) assert.equal(t.inputSchema.type, 'object', t.name);
  const rp = byName.run_python;
  assert.deepEqual(rp.inputSchema.required, ['code']);
  assert.equal(rp.outputSchema.type, 'object');
  for (const word of ['numpy', 'pandas', 'matplotlib', 'no network', 'persist']) {
    assert.ok(rp.description.includes(word), `run_python's description lacks "${word}"`);
  }
});

test('run_python keeps state between two calls', async () => {
  const first = await run('import math\nanswer = 6 * 7\nprint("set", flush=True)');
  assert.equal(first.isError, false, textOf(first) + logs());
  assert.equal(textOf(first), 'set');
  const second = await run('answer + math.floor(0.5)');
  assert.equal(second.isError, false, textOf(second));
  assert.match(textOf(second), /42/);
  assert.equal(second.structuredContent.status, 'ok');
  assert.equal(second.structuredContent.session_state, 'kept');
  assert.equal(second.structuredContent.outputs.at(-1).output_type, 'execute_result');
});

test('a matplotlib figure comes back as a PNG image block', { skip: pythonLacks('matplotlib') }, async () => {
  const r = await run('import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.title("squares")');
  assert.equal(r.isError, false, textOf(r) + logs());
  const images = r.content.filter((c) => c.type === 'image');
  assert.equal(images.length, 1, JSON.stringify(r.content.map((c) => c.type)));
  assert.equal(images[0].mimeType, 'image/png');
  const png = Buffer.from(images[0].data, 'base64');
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  assert.ok(png.length > 1000, `a tiny PNG: ${png.length} bytes`);
  assert.equal(r.structuredContent.images, 1);
});

test('an exception is isError with a readable traceback, and the state survives it', async () => {
  const r = await run('def f(x):\n    return 1 / x\nf(0)');
  assert.equal(r.isError, true);
  assert.match(textOf(r), /Traceback \(most recent call last\)/);
  assert.match(textOf(r), /ZeroDivisionError: division by zero/);
  assert.equal(r.structuredContent.error.name, 'ZeroDivisionError');
  const after = await run('answer');
  assert.match(textOf(after), /42/);
});

test('progress notifications arrive while a cell prints', async () => {
  const progress = [];
  const r = await run('import time\nfor i in range(4):\n    print("step", i, flush=True)\n    time.sleep(0.6)', {
    onprogress: (p) => progress.push(p),
  });
  assert.equal(r.isError, false, textOf(r));
  assert.match(textOf(r), /step 3/);
  assert.ok(progress.length >= 1, 'no progress notification');
  assert.ok(progress.some((p) => /step/.test(p.message ?? '')), JSON.stringify(progress));
  for (let i = 1; i < progress.length; ++i) assert.ok(progress[i].progress > progress[i - 1].progress);
});

test('files: upload, list, read from Python, download', { skip: pythonLacks('pandas') }, async () => {
  const csv = 'a,b\n1,2\n3,4\n';
  const up = await client.callTool({
    name: 'upload_file',
    arguments: { path: 'data/in.csv', content_base64: Buffer.from(csv).toString('base64') },
  });
  assert.equal(up.isError, false, textOf(up));
  assert.deepEqual(up.structuredContent, { path: 'data/in.csv', size: csv.length });
  const listed = await client.callTool({ name: 'list_files', arguments: {} });
  assert.ok(listed.structuredContent.files.some((f) => f.path === 'data/in.csv' && f.size === csv.length),
    JSON.stringify(listed.structuredContent));
  const r = await run('import pandas as pd\ndf = pd.read_csv("data/in.csv")\ndf.to_csv("out.csv", index=False)\nint(df.b.sum())');
  assert.match(textOf(r), /6/, textOf(r));
  const down = await client.callTool({ name: 'download_file', arguments: { path: 'out.csv' } });
  assert.equal(down.isError, false, textOf(down));
  assert.equal(down.structuredContent.encoding, 'utf-8');
  assert.equal(down.structuredContent.content, csv);
  const missing = await client.callTool({ name: 'download_file', arguments: { path: 'nope.txt' } });
  assert.equal(missing.isError, true);
  assert.match(textOf(missing), /path: no such file/);
});

test('invalid arguments are a tool error that names the argument', async () => {
  const r = await client.callTool({ name: 'run_python', arguments: { code: 'print(1)', timeout: 'soon' } });
  assert.equal(r.isError, true);
  assert.match(textOf(r), /timeout:/);
  const up = await client.callTool({ name: 'upload_file', arguments: { path: '../escape', content_base64: 'aGk=' } });
  assert.equal(up.isError, true);
  assert.match(textOf(up), /path:/);
});

test('cancelling a long cell interrupts it; the interpreter and its state live on', async () => {
  const controller = new AbortController();
  const started = Date.now();
  const call = run('import time\nfinished = False\nfor _ in range(600):\n    time.sleep(0.1)\nfinished = True', {
    signal: controller.signal,
    timeout: 120000,
  });
  await sleep(2000);
  controller.abort('the test cancels');
  await assert.rejects(call);
  const r = await run('(answer, finished)');
  const elapsed = Date.now() - started;
  assert.equal(r.isError, false, textOf(r) + logs());
  assert.match(textOf(r), /\(42, False\)/, 'the cell ran to its end, or the state was lost: ' + textOf(r));
  assert.ok(elapsed < 20000, `the next call came back after ${elapsed} ms: the cell was not interrupted`);
});

test('reset starts a fresh interpreter', async () => {
  const r = await client.callTool({ name: 'reset', arguments: {} });
  assert.equal(r.isError, false, textOf(r));
  const gone = await run('answer');
  assert.equal(gone.isError, true);
  assert.match(textOf(gone), /NameError/);
  const files = await client.callTool({ name: 'list_files', arguments: {} });
  assert.deepEqual(files.structuredContent.files, []);
});

if (kind === 'http') {
  test('terminating the HTTP session ends it: its id is refused afterwards', async () => {
    const id = session.transport.sessionId;
    await session.transport.terminateSession();
    const res = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: {
        Authorization: `Bearer ${server.key}`,
        'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream',
        'Mcp-Session-Id': id,
        'MCP-Protocol-Version': '2025-11-25',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
    });
    assert.equal(res.status, 404);
  });
}
