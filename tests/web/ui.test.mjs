// The playground (/) and the operator console (/console) in headless
// Chromium against a real `kiln serve` that this test starts (127.0.0.1, an
// ephemeral port). Each step saves a screenshot into $KILN_WEB_ARTIFACTS.
// Run by run.sh after check.mjs (which skips where sandboxes or Chromium
// cannot run). tests/web/README.md.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { launchBrowser, pythonLacks, startServer } from './harness.mjs';

const ARTIFACTS = process.env.KILN_WEB_ARTIFACTS || fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-web-artifacts-'));
fs.mkdirSync(ARTIFACTS, { recursive: true });
let shotNo = 0;

async function shot(page, name, { fullPage = true } = {}) {
  shotNo += 1;
  const file = path.join(ARTIFACTS, `${String(shotNo).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file, fullPage });
  return file;
}

const lacking = pythonLacks('matplotlib', 'pandas');
const skipScientific = lacking.length
  ? `/usr/bin/python3 cannot import ${lacking.join(', ')} on this host (make deps installs python3-${lacking.join(' python3-')})`
  : false;

let server;
let browser;
let page;
const pageErrors = [];
let playgroundViolations = [];

// --- the notebook, as a person would use it -----------------------------------

async function cellCount() {
  return page.$$eval('.cell', (cells) => cells.length);
}

// Types `code` into cell i (replacing what it held) and runs it with Shift+Enter.
async function runInCell(i, code) {
  const hosts = await page.$$('.cell .cell-editor');
  assert.ok(hosts[i], `there is a cell ${i}`);
  await hosts[i].click();
  await page.keyboard.down('Control');
  await page.keyboard.press('KeyA');
  await page.keyboard.up('Control');
  await page.keyboard.press('Backspace');
  await page.keyboard.type(code);
  await page.keyboard.down('Shift');
  await page.keyboard.press('Enter');
  await page.keyboard.up('Shift');
}

// Runs `code` in a new cell at the end; resolves to its index.
async function runNewCell(code) {
  const i = (await cellCount()) - 1; // Shift+Enter always leaves an empty cell last
  await runInCell(i, code);
  return i;
}

async function waitDone(i, timeout = 60000) {
  await page.waitForFunction((n) => {
    const c = document.querySelectorAll('.cell')[n];
    return c && c.dataset.state && c.dataset.state !== 'running';
  }, { timeout }, i);
  return page.evaluate((n) => {
    const c = document.querySelectorAll('.cell')[n];
    return {
      state: c.dataset.state,
      status: c.querySelector('.cell-status').textContent,
      explain: c.querySelector('.cell-explain').textContent,
      output: c.querySelector('.cell-output').innerText,
    };
  }, i);
}

async function violations() {
  return page.evaluate(() => window.__kilnViolations);
}

// Chromium reports, as CSP violations, the inline handlers and styles it
// refuses while the sanitiser parses untrusted HTML into an inert document
// (where nothing would run anyway): inline attributes and <style> only.
// Anything else (a script, a fetch, an image from elsewhere) is the page
// breaking its own policy.
const PARSE_REFUSALS = new Set(['script-src-attr', 'style-src-attr', 'style-src-elem']);
function unexpected(list) {
  return list.filter((v) => !(PARSE_REFUSALS.has(v.directive) && v.blocked === 'inline'));
}

async function messageText() {
  return page.$eval('#message', (m) => (m.hidden ? '' : m.textContent));
}

describe('kiln web playground and console', () => {
  before(async () => {
    server = await startServer();
    browser = await launchBrowser();
    page = await browser.newPage();
    // Every CSP violation the pages report.
    await page.evaluateOnNewDocument(() => {
      window.__kilnViolations = [];
      document.addEventListener('securitypolicyviolation', (e) => {
        const t = e.target;
        window.__kilnViolations.push({ directive: e.violatedDirective, blocked: e.blockedURI, sample: e.sample,
          target: t && t.outerHTML ? t.outerHTML.slice(0, 200) : String(t) });
      });
    });
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    page.on('console', (m) => {
      if (m.type() === 'error') pageErrors.push(`console: ${m.text()}`);
    });
  });

  after(async () => {
    if (browser) await browser.close();
    if (server) await server.stop();
  });

  it('serves the pages with a strict Content-Security-Policy and no CDN', async () => {
    const res = await fetch(`${server.url}/`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/html/);
    const csp = res.headers.get('content-security-policy');
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'(;|$)/);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
    assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
    const html = await res.text();
    assert.doesNotMatch(html, /https?:\/\//, 'the page loads nothing from another origin');
    assert.doesNotMatch(html, /\son[a-z]+=/i, 'no inline event handlers');
    const etag = res.headers.get('etag');
    const again = await fetch(`${server.url}/`, { headers: { 'If-None-Match': etag } });
    assert.equal(again.status, 304);
    const script = /src="(\/ui\/playground-[A-Z0-9]+\.js)"/.exec(html);
    assert.ok(script, 'the page names its hashed bundle');
    const js = await fetch(`${server.url}${script[1]}`);
    assert.equal(js.status, 200);
    assert.match(js.headers.get('content-type'), /^text\/javascript/);
    assert.match(js.headers.get('cache-control'), /immutable/);
    assert.equal((await fetch(`${server.url}/ui/nothing.js`)).status, 404);
    assert.equal((await fetch(`${server.url}/`, { method: 'POST' })).status, 405);
  });

  it('says clearly when the key is wrong', async () => {
    await page.goto(`${server.url}/`, { waitUntil: 'load' });
    await page.type('#key', 'kiln_000000000000_not-a-key');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => !document.getElementById('message').hidden, { timeout: 10000 });
    const text = await messageText();
    assert.match(text, /refused this API key \(401 unauthenticated\)/);
    assert.equal(await page.$eval('#session-bar', (b) => b.hidden), true);
    assert.equal(await page.evaluate(() => sessionStorage.getItem('kiln.key')), null);
    await shot(page, 'wrong-key');
  });

  it('takes the key once (sessionStorage, never the URL) and opens a session', async () => {
    await page.type('#key', server.key);
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => !document.getElementById('session-bar').hidden, { timeout: 10000 });
    assert.equal(await page.evaluate(() => sessionStorage.getItem('kiln.key')), server.key);
    assert.ok(!page.url().includes(server.key));
    const profiles = await page.$$eval('#profile option', (o) => o.map((x) => x.value));
    assert.ok(profiles.includes('default'), `profiles: ${profiles}`);
    await page.click('#start');
    await page.waitForFunction(() => /session [0-9a-f]{8}/.test(document.getElementById('session-info').textContent), { timeout: 60000 });
    await shot(page, 'session');
  });

  it('runs print in a cell', async () => {
    await runInCell(0, 'print("hello", 6 * 7)');
    const r = await waitDone(0);
    assert.equal(r.state, 'ok', JSON.stringify(r));
    assert.match(r.output, /hello 42/);
    assert.match(r.status, /^ok · [\d.]+ (ms|s) · cpu [\d.]+ (ms|s) · peak /);
    assert.match(r.status, /session kept/);
  });

  it('streams output: the first line shows before the second is printed', async () => {
    const i = await runNewCell('import time; print("first", flush=True); time.sleep(1); print("second")');
    await page.waitForFunction((n) => /first/.test(document.querySelectorAll('.cell')[n].querySelector('.cell-output').textContent), { timeout: 30000 }, i);
    const seen = await page.evaluate((n) => {
      const c = document.querySelectorAll('.cell')[n];
      return { text: c.querySelector('.cell-output').textContent, state: c.dataset.state };
    }, i);
    assert.doesNotMatch(seen.text, /second/);
    assert.equal(seen.state, 'running');
    await shot(page, 'streaming-first-line');
    const firstAt = Date.now();
    const r = await waitDone(i);
    assert.equal(r.state, 'ok');
    assert.match(r.output, /first\s+second/);
    assert.ok(Date.now() - firstAt > 500, 'the second line came later');
  });

  it('shows a matplotlib plot as an image at its natural size', { skip: skipScientific }, async () => {
    const i = await runNewCell('import matplotlib.pyplot as plt; plt.figure(figsize=(4, 3), dpi=100); plt.plot([1, 3, 2]); plt.title("kiln"); plt.show()');
    const r = await waitDone(i);
    assert.equal(r.state, 'ok', JSON.stringify(r));
    const img = await page.evaluate((n) => {
      const im = document.querySelectorAll('.cell')[n].querySelector('img.out-image');
      return im && { nw: im.naturalWidth, nh: im.naturalHeight, w: im.clientWidth, h: im.clientHeight, src: im.src.slice(0, 22) };
    }, i);
    assert.ok(img, 'an image is shown');
    assert.equal(img.src, 'data:image/png;base64,');
    assert.equal(img.nw, 400);
    assert.equal(img.nh, 300);
    assert.equal(img.w, img.nw);
    assert.equal(img.h, img.nh);
    // Before any untrusted HTML was shown, the playground (its editor
    // included) broke no rule of its Content-Security-Policy.
    assert.deepEqual(await violations(), []);
  });

  it('shows a DataFrame as a table', { skip: skipScientific }, async () => {
    const i = await runNewCell('import pandas as pd; df = pd.DataFrame({"city": ["Oslo", "Lima"], "temp": [3.5, 19.0]}); df');
    const r = await waitDone(i);
    assert.equal(r.state, 'ok', JSON.stringify(r));
    const table = await page.evaluate((n) => {
      const t = document.querySelectorAll('.cell')[n].querySelector('.out-html table');
      return t && { rows: t.querySelectorAll('tbody tr').length, head: t.querySelector('thead').innerText, body: t.querySelector('tbody').innerText };
    }, i);
    assert.ok(table, 'a table is shown');
    assert.equal(table.rows, 2);
    assert.match(table.head, /city\s+temp/);
    assert.match(table.body, /Oslo\s+3\.5/);
    await shot(page, 'plot-and-table');
  });

  it('shows an exception with its traceback', async () => {
    const i = await runNewCell('x = 41; (lambda: 1 / 0)()');
    const r = await waitDone(i);
    assert.equal(r.state, 'error');
    const err = await page.evaluate((n) => {
      const c = document.querySelectorAll('.cell')[n];
      return { head: c.querySelector('.out-error-head')?.textContent, tb: c.querySelector('.out-traceback')?.textContent };
    }, i);
    assert.match(err.head, /^ZeroDivisionError: division by zero/);
    assert.match(err.tb, /Traceback|line 1/);
    assert.match(err.tb, /lambda/);
    assert.match(r.explain, /raised ZeroDivisionError; the session and its variables are kept/);
    await shot(page, 'traceback');
  });

  it('interrupts a while True loop and keeps the state', async () => {
    const i = await runNewCell('while True: pass');
    await page.waitForFunction((n) => document.querySelectorAll('.cell')[n].dataset.state === 'running', { timeout: 10000 }, i);
    await sleep(1000);
    assert.equal(await page.evaluate((n) => document.querySelectorAll('.cell')[n].dataset.state, i), 'running');
    await page.click('#interrupt');
    const r = await waitDone(i, 30000);
    assert.equal(r.state, 'interrupted', JSON.stringify(r));
    assert.match(r.status, /^interrupted · .* · session kept$/);
    assert.match(r.explain, /Interrupted \(KeyboardInterrupt\); the session and its variables are kept/);
    await shot(page, 'interrupted');
    const j = await runNewCell('print(x + 1)');
    const after = await waitDone(j);
    assert.equal(after.state, 'ok');
    assert.match(after.output, /^42/);
  });

  it('uploads a dropped file into the workspace, reads it from Python, downloads it', async () => {
    await page.evaluate(() => {
      const dt = new DataTransfer();
      dt.items.add(new File(['name,n\nkiln,7\n'], 'data.csv', { type: 'text/csv' }));
      const zone = document.getElementById('dropzone');
      zone.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
      zone.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
    });
    await page.waitForSelector('#file-list li.file[data-path="data.csv"]', { timeout: 10000 });
    const i = await runNewCell('print(open("data.csv").read().splitlines()[1]); open("out.txt", "w").write("made in kiln")');
    const r = await waitDone(i);
    assert.equal(r.state, 'ok', JSON.stringify(r));
    assert.match(r.output, /^kiln,7/);
    await page.waitForSelector('#file-list li.file[data-path="out.txt"]', { timeout: 10000 });
    await shot(page, 'files');
    const downloads = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-web-dl-'));
    try {
      const cdp = await page.createCDPSession();
      await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: downloads });
      await page.click('#file-list li.file[data-path="out.txt"] button.link');
      const file = path.join(downloads, 'out.txt');
      for (let k = 0; k < 100 && !fs.existsSync(file); ++k) await sleep(100);
      assert.equal(fs.readFileSync(file, 'utf8'), 'made in kiln');
    } finally {
      fs.rmSync(downloads, { recursive: true, force: true });
    }
  });

  it('runs nothing from HTML the sandbox displayed (img onerror, script)', async () => {
    await page.evaluate(() => { window.__kilnXss = 0; });
    const title = await page.title();
    const i = await runNewCell('display(type("H", (), {"_repr_html_": lambda self: "<img src=x onerror=\\"window.__kilnXss=1;document.title=\'pwned\'\\"><script>window.__kilnXss=2</script><svg><script>window.__kilnXss=3</script></svg><a href=\\"javascript:window.__kilnXss=4\\">link</a><b class=\\"kiln-b\\">still bold</b>"})())');
    const r = await waitDone(i);
    assert.equal(r.state, 'ok', JSON.stringify(r));
    await sleep(500); // an error event of a broken image would have fired by now
    const out = await page.evaluate((n) => {
      const box = document.querySelectorAll('.cell')[n].querySelector('.out-html');
      return {
        sentinel: window.__kilnXss,
        title: document.title,
        html: box ? box.innerHTML : null,
        bold: box ? box.querySelector('b')?.textContent : null,
        scripts: box ? box.querySelectorAll('script').length : -1,
        handlers: box ? [...box.querySelectorAll('*')].filter((e) => [...e.attributes].some((a) => a.name.startsWith('on'))).length : -1,
        href: box?.querySelector('a')?.getAttribute('href') ?? null,
      };
    }, i);
    assert.equal(out.sentinel, 0, `the sentinel was set: ${out.html}`);
    assert.equal(out.title, title);
    assert.equal(out.bold, 'still bold', `the harmless markup is shown: ${out.html}`);
    assert.equal(out.scripts, 0);
    assert.equal(out.handlers, 0);
    assert.equal(out.href, null);
    assert.deepEqual(unexpected(await violations()), []);
    await shot(page, 'html-sanitised');
  });

  it('restarts and deletes the session', async () => {
    const before = await page.$eval('#session-info .session-id', (e) => e.title);
    await page.click('#restart');
    await page.waitForFunction((id) => {
      const e = document.querySelector('#session-info .session-id');
      return e && e.title !== id;
    }, { timeout: 60000 }, before);
    const i = await runNewCell('print(x)');
    const r = await waitDone(i);
    assert.equal(r.state, 'error');
    assert.match(r.output, /NameError/);
    await page.click('#delete');
    await page.waitForFunction(() => /no session/.test(document.getElementById('session-info').textContent), { timeout: 10000 });
    const res = await fetch(`${server.url}/v1/sessions`, { headers: { Authorization: `Bearer ${server.key}` } });
    assert.deepEqual((await res.json()).sessions, []);
  });

  it('explains a memory kill: the sandbox is gone and so is the session', async () => {
    await page.select('#profile', 'default');
    await page.click('#start');
    await page.waitForFunction(() => /session [0-9a-f]{8}/.test(document.getElementById('session-info').textContent), { timeout: 60000 });
    const i = await runNewCell('x = bytearray(900 * 2**20)');
    const r = await waitDone(i, 60000);
    assert.equal(r.state, 'memory_limit', JSON.stringify(r));
    assert.match(r.status, /^memory_limit · .* · session lost$/);
    assert.match(r.explain, /^Over the memory limit \(out of memory: limit 512 MiB\): the sandbox was killed and the session is gone \(its variables are lost\): start a new session\.$/);
    const info = await page.$eval('#session-info', (e) => e.textContent);
    assert.match(info, /Session ended: the last cell ended it \(memory_limit: out of memory/);
    assert.equal(await page.$eval('.cell:last-child .cell-run', (b) => b.disabled), true);
    await shot(page, 'memory-kill');
  });

  it('explains a policy violation: refused, the session kept', async () => {
    await page.select('#profile', 'strict');
    await page.click('#start');
    await page.waitForFunction(() => /· strict ·/.test(document.getElementById('session-info').textContent), { timeout: 60000 });
    const i = await runNewCell('import os');
    const r = await waitDone(i);
    assert.equal(r.state, 'policy_violation', JSON.stringify(r));
    assert.match(r.status, /session kept$/);
    assert.match(r.explain, /^Refused by the profile's policy \(import of 'os' is forbidden by the import policy .*\); the session and its variables are kept\.$/);
    assert.match(r.output, /ImportPolicyViolation/);
    await shot(page, 'policy-violation');
    await page.click('#delete');
    await page.waitForFunction(() => /no session/.test(document.getElementById('session-info').textContent), { timeout: 10000 });
  });

  it('shows the operator console under load, without the admin panels a tenant key may not see', async () => {
    playgroundViolations = await violations();
    await page.goto(`${server.url}/console`, { waitUntil: 'load' });
    // The key from the playground, in this tab's sessionStorage.
    await page.waitForFunction(() => !document.getElementById('dashboard').hidden, { timeout: 10000 });
    // Load: one-shot executions through the API, a few at a time, for ~8 s.
    const statuses = [];
    const run = (code) => fetch(`${server.url}/v1/execute`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${server.key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ code, timeout: 10 }),
    }).then(async (res) => {
      statuses.push(res.status === 200 ? (await res.json()).status : `http ${res.status}`);
      if (res.status !== 200) await sleep(250); // over the tenant's rate: back off a little
    });
    const codes = ['print(sum(range(10**5)))', '1/0', 'import time; time.sleep(0.3)'];
    const until = Date.now() + 8000;
    let n = 0;
    const workers = [0, 1, 2].map(async () => {
      while (Date.now() < until) await run(codes[n++ % codes.length]);
    });
    await Promise.all(workers);
    assert.ok(statuses.filter((s) => s === 'ok').length >= 3, `statuses: ${statuses}`);
    assert.ok(statuses.includes('error'), `statuses: ${statuses}`);
    await page.waitForFunction(() => Number(document.body.dataset.polls || 0) >= 8, { timeout: 20000 });
    const view = await page.evaluate(() => ({
      tiles: document.getElementById('tiles').innerText,
      charts: document.querySelectorAll('.uplot canvas').length,
      pool: document.getElementById('pool-table').innerText,
      layers: document.getElementById('layers-table').innerText,
      eventsHidden: document.getElementById('events-panel').hidden,
      tenantsHidden: document.getElementById('tenants-panel').hidden,
      lockdownHidden: document.getElementById('lockdown-panel').hidden,
      note: document.getElementById('admin-note').textContent,
      legend: document.querySelector('#chart-rate .u-legend')?.innerText ?? '',
    }));
    assert.equal(view.charts, 4);
    assert.match(view.tiles, /ready/);
    assert.match(view.tiles, /[\d.]+ (ms|s) \/ [\d.]+ (ms|s)\s*p50 \/ p99 \(60 s\)/);
    assert.match(view.layers, /landlock/i);
    assert.match(view.legend, /ok/);
    assert.equal(view.eventsHidden, true);
    assert.equal(view.tenantsHidden, true);
    assert.equal(view.lockdownHidden, true);
    assert.match(view.note, /hidden: this is not an admin key \(a tenant's key gets 404 on the admin routes/);
    // The stats the console drew from, straight from the API.
    const stats = await (await fetch(`${server.url}/v1/stats`, { headers: { Authorization: `Bearer ${server.key}` } })).json();
    assert.ok(stats.executions.ok >= 3);
    assert.ok(stats.latency_ms.count >= 3);
    assert.ok(stats.latency_ms.p50 <= stats.latency_ms.p99);
    await shot(page, 'console-under-load', { fullPage: false });
  });

  it('with an admin key the console shows events and tenants, and switches lockdown on and off', async () => {
    const admin = server.createAdminKey();
    const tenantKey = server.createKey('web-q');
    const api = (method, path, key, body) => fetch(`${server.url}${path}`, {
      method,
      headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    await page.evaluate(() => sessionStorage.clear());
    await page.goto(`${server.url}/console`, { waitUntil: 'load' });
    await page.type('#key', admin);
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => !document.getElementById('events-panel').hidden &&
      !document.getElementById('tenants-panel').hidden && !document.getElementById('lockdown-panel').hidden, { timeout: 15000 });
    assert.equal(await page.$eval('#admin-note', (n) => n.textContent), '');
    // A quarantine shows in the tenants table and as an event.
    assert.equal((await api('POST', '/v1/admin/tenants/web-q/quarantine', admin, { reason: 'from the console test' })).status, 200);
    await page.waitForFunction(() => /from the console test/.test(document.getElementById('tenants-table').innerText) &&
      /tenant_quarantined/.test(document.getElementById('events-table').innerText), { timeout: 15000 });
    // The switch: new executions get 503 lockdown, /readyz says so; then lifted.
    await page.type('#lockdown-reason', 'console drill');
    await page.click('#lockdown-on');
    await page.waitForFunction(() => /Locked down.*console drill/.test(document.getElementById('lockdown-state').textContent), { timeout: 10000 });
    const refused = await api('POST', '/v1/execute', server.key, { code: 'print(1)' });
    assert.equal(refused.status, 503);
    assert.equal((await refused.json()).error.code, 'lockdown');
    assert.equal((await fetch(`${server.url}/readyz`)).status, 503);
    await shot(page, 'console-admin-lockdown', { fullPage: false });
    await page.click('#lockdown-off');
    await page.waitForFunction(() => /Not locked down/.test(document.getElementById('lockdown-state').textContent), { timeout: 10000 });
    assert.equal((await fetch(`${server.url}/readyz`)).status, 200);
    const ran = await api('POST', '/v1/execute', server.key, { code: 'print(1)' });
    assert.equal(ran.status, 200);
    assert.equal((await api('POST', '/v1/admin/tenants/web-q/release', admin, {})).status, 200);
    assert.equal((await api('POST', '/v1/execute', tenantKey, { code: 'print(2)' })).status, 200);
  });

  it('the console says clearly when the key is wrong', async () => {
    await page.evaluate(() => sessionStorage.clear());
    await page.goto(`${server.url}/console`, { waitUntil: 'load' });
    await page.type('#key', 'kiln_000000000000_not-a-key');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => !document.getElementById('message').hidden, { timeout: 10000 });
    assert.match(await messageText(), /refused this API key \(401 unauthenticated\)/);
    assert.equal(await page.$eval('#dashboard', (d) => d.hidden), true);
  });

  it('raised no script error and broke no rule of the Content-Security-Policy', async () => {
    // The console (the page loaded last) shows no untrusted HTML: no violation
    // at all; the playground only the sanitiser's parse refusals.
    assert.deepEqual(await violations(), []);
    assert.deepEqual(unexpected(playgroundViolations), []);
    // Chromium logs every non-2xx fetch as a console error (the wrong keys'
    // 401s, the admin routes' 404s, /readyz's 503 during the lockdown), and
    // each violation above.
    const real = pageErrors.filter((e) => !/Failed to load resource: the server responded with a status of (401|404|503)/.test(e) &&
      !/violates the following Content Security Policy directive/.test(e));
    assert.deepEqual(real, []);
  });
});
