// The playground (served at /): a key, a profile, a session, notebook cells,
// the session's files. Only the public API (docs/api.md) is used.
import './style.css';

import { ApiError, call, el, keyLabel, encodePath, formatBytes, formatMs, storeKey, storedKey, stream } from './api.js';
import { createEditor } from './editor.js';
import { OutputArea, explainResult } from './render.js';

const $ = (id) => document.getElementById(id);

const state = {
  key: storedKey(),
  session: null, // the session object of the API
  gone: null, // why the session ended, when it did
  running: null, // the Cell running now
  cells: [],
};

// --- messages ---------------------------------------------------------------

function showMessage(text, kind = 'error') {
  const box = $('message');
  box.textContent = text;
  box.className = `message ${kind}`;
  box.hidden = !text;
}
function clearMessage() {
  showMessage('', 'info');
}
function showError(e) {
  showMessage(e instanceof ApiError ? e.describe() : String(e && e.message ? e.message : e));
}

// --- the key ----------------------------------------------------------------

async function connect(key) {
  clearMessage();
  const profiles = await call(key, 'GET', '/v1/profiles');
  state.key = key;
  storeKey(key);
  const select = $('profile');
  select.replaceChildren();
  for (const p of profiles.profiles) {
    const limits = p.defaults || {};
    const label = `${p.name}${p.preload && p.preload.length ? ` (preloads ${p.preload.join(', ')})` : ''}` +
      `${limits.memory_bytes ? ` · ${formatBytes(limits.memory_bytes)}` : ''}`;
    select.append(el('option', { value: p.name, selected: p.name === profiles.default }, label));
  }
  $('key-state').textContent = `${keyLabel(key)} accepted`;
  $('key-form').classList.add('connected');
  $('session-bar').hidden = false;
  updateControls();
}

function forgetKey() {
  storeKey('');
  state.key = '';
  $('key').value = '';
  $('key-state').textContent = '';
  $('key-form').classList.remove('connected');
  $('session-bar').hidden = true;
}

// --- the session ------------------------------------------------------------

function renderSession() {
  const info = $('session-info');
  const s = state.session;
  if (state.gone) {
    info.replaceChildren(el('span', { class: 'gone' }, `Session ended: ${state.gone}`));
  } else if (!s) {
    info.replaceChildren(el('span', { class: 'muted' }, 'no session'));
  } else {
    const l = s.limits || {};
    info.replaceChildren(
      el('span', { class: 'session-id', title: s.id }, `session ${s.id.slice(0, 8)}`),
      ` · ${s.profile}${s.pooled ? ' · from the warm pool' : ' · cold start'}`,
      ` · ${formatBytes(l.memory_bytes)} · ${l.cpus} cpu · ${l.timeout_s} s per cell`,
    );
  }
  updateControls();
}

function updateControls() {
  const live = !!state.session && !state.gone;
  $('start').disabled = !state.key || !!state.running;
  $('start').textContent = live ? 'New session' : 'Start session';
  $('interrupt').disabled = !state.running;
  $('restart').disabled = !live || !!state.running;
  $('delete').disabled = !live;
  $('files').hidden = !live;
  for (const c of state.cells) c.updateControls();
}

async function startSession() {
  clearMessage();
  const profile = $('profile').value;
  if (state.session && !state.gone) await deleteSession(true);
  $('start').disabled = true;
  $('session-info').replaceChildren(el('span', { class: 'muted' }, `starting a ${profile} session…`));
  try {
    state.session = await call(state.key, 'POST', '/v1/sessions', { json: { profile } });
    state.gone = null;
  } catch (e) {
    state.session = null;
    showError(e);
  }
  renderSession();
  await refreshFiles();
  if (state.session && state.cells.length) state.cells[0].focus();
}

async function deleteSession(quiet) {
  const s = state.session;
  if (!s) return;
  try {
    await call(state.key, 'DELETE', `/v1/sessions/${s.id}`);
  } catch (e) {
    if (!(e instanceof ApiError && (e.status === 404 || e.status === 410))) {
      showError(e);
      return;
    }
  }
  state.session = null;
  state.gone = null;
  if (!quiet) showMessage('The session was deleted; its sandbox and files are gone.', 'info');
  renderSession();
  $('file-list').replaceChildren();
}

async function restartSession() {
  await deleteSession(true);
  await startSession();
  if (state.session) showMessage('Restarted: a fresh interpreter, no variables, an empty workspace.', 'info');
}

async function interrupt() {
  if (!state.session) return;
  try {
    await call(state.key, 'POST', `/v1/sessions/${state.session.id}/interrupt`);
  } catch (e) {
    showError(e);
  }
}

function sessionEnded(reason) {
  state.gone = reason;
  renderSession();
}

// --- cells ------------------------------------------------------------------

class Cell {
  constructor(doc = '') {
    this.root = el('section', { class: 'cell' });
    this.prompt = el('div', { class: 'cell-prompt' }, '[ ]');
    this.editorHost = el('div', { class: 'cell-editor' });
    this.runButton = el('button', { class: 'cell-run', type: 'button', title: 'Run (Shift+Enter)' }, 'Run');
    this.stopButton = el('button', { class: 'cell-interrupt', type: 'button', hidden: true }, 'Interrupt');
    this.status = el('div', { class: 'cell-status', role: 'status' });
    this.explain = el('div', { class: 'cell-explain' });
    this.outputBox = el('div', { class: 'cell-output' });
    this.output = new OutputArea(this.outputBox);
    this.root.append(
      el('div', { class: 'cell-head' }, this.prompt, this.editorHost,
        el('div', { class: 'cell-buttons' }, this.runButton, this.stopButton)),
      this.status, this.explain, this.outputBox,
    );
    this.view = createEditor(this.editorHost, { doc, onRun: () => this.runAndAdvance() });
    this.runButton.addEventListener('click', () => this.run());
    this.stopButton.addEventListener('click', () => interrupt());
  }

  focus() {
    this.view.focus();
  }

  updateControls() {
    const live = !!state.session && !state.gone;
    this.runButton.disabled = !live || !!state.running;
    this.stopButton.hidden = state.running !== this;
  }

  async runAndAdvance() {
    const ran = this.run();
    const i = state.cells.indexOf(this);
    if (i === state.cells.length - 1) addCell();
    state.cells[i + 1].focus();
    await ran;
  }

  async run() {
    clearMessage();
    if (!state.session || state.gone) {
      showMessage(state.gone ? `The session ended (${state.gone}); start a new one.` : 'Start a session first.');
      return;
    }
    if (state.running) {
      showMessage('Another cell is running: a session runs one cell at a time.');
      return;
    }
    const code = this.view.state.doc.toString();
    const session = state.session;
    state.running = this;
    this.root.dataset.state = 'running';
    this.output.clear();
    this.explain.textContent = '';
    const started = performance.now();
    const tick = () => {
      this.status.textContent = `running… ${((performance.now() - started) / 1000).toFixed(1)} s`;
    };
    tick();
    const timer = setInterval(tick, 100);
    updateControls();
    try {
      const done = await stream(state.key, `/v1/sessions/${session.id}/execute`, { code },
        (name, data) => this.output.event(name, data));
      if (done.error && !done.status) throw new ApiError(200, done.error.code, done.error.message, done.error.field);
      this.finish(done);
    } catch (e) {
      this.root.dataset.state = 'failed';
      this.status.textContent = 'not run';
      if (e instanceof ApiError && e.status === 410) {
        sessionEnded(e.message);
        this.status.textContent = 'session gone';
      }
      showError(e);
    } finally {
      clearInterval(timer);
      state.running = null;
      updateControls();
    }
    if (state.session === session && !state.gone) await refreshFiles();
  }

  finish(r) {
    this.root.dataset.state = r.status;
    if (Number.isInteger(r.execution_count)) this.prompt.textContent = `[${r.execution_count}]`;
    const parts = [r.status, formatMs(r.duration_ms), `cpu ${formatMs(r.cpu_ms)}`,
      `peak ${formatBytes(r.peak_memory_bytes)}`];
    if (r.session_state) parts.push(`session ${r.session_state}`);
    this.status.textContent = parts.join(' · ');
    this.explain.textContent = explainResult(r);
    if (r.stdout_truncated || r.stderr_truncated) this.explain.textContent += ' Output was truncated.';
    if (r.session_state === 'lost') sessionEnded(`the last cell ended it (${r.status}: ${r.reason || ''})`);
  }
}

function addCell(doc = '') {
  const cell = new Cell(doc);
  state.cells.push(cell);
  $('cells').append(cell.root);
  cell.updateControls();
  return cell;
}

// --- files ------------------------------------------------------------------

async function refreshFiles() {
  const list = $('file-list');
  if (!state.session || state.gone) {
    list.replaceChildren();
    return;
  }
  let files;
  try {
    files = (await call(state.key, 'GET', `/v1/sessions/${state.session.id}/files`)).files;
  } catch (e) {
    if (e instanceof ApiError && e.status === 409) return; // a cell is running
    showError(e);
    return;
  }
  list.replaceChildren();
  if (!files.length) list.append(el('li', { class: 'muted' }, 'empty workspace'));
  for (const f of files) {
    if (f.directory) {
      list.append(el('li', { class: 'dir' }, `${f.path}/`));
      continue;
    }
    const download = el('button', { type: 'button', class: 'link', title: `Download ${f.path}` }, f.path);
    download.addEventListener('click', () => downloadFile(f.path));
    const remove = el('button', { type: 'button', class: 'small', title: `Delete ${f.path}` }, '×');
    remove.addEventListener('click', () => deleteFile(f.path));
    list.append(el('li', { class: 'file', dataset: { path: f.path } }, download, el('span', { class: 'muted' }, formatBytes(f.size)), remove));
  }
}

async function uploadFiles(fileList) {
  if (!state.session || state.gone) {
    showMessage('Start a session first: files go into its workspace.');
    return;
  }
  clearMessage();
  for (const file of fileList) {
    try {
      await call(state.key, 'PUT', `/v1/sessions/${state.session.id}/files/${encodePath(file.name)}`, {
        body: file,
      });
    } catch (e) {
      showError(e);
      break;
    }
  }
  await refreshFiles();
}

async function downloadFile(path) {
  try {
    const res = await call(state.key, 'GET', `/v1/sessions/${state.session.id}/files/${encodePath(path)}`, { raw: true });
    const url = URL.createObjectURL(await res.blob());
    const a = el('a', { href: url, download: path.split('/').pop() });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (e) {
    showError(e);
  }
}

async function deleteFile(path) {
  try {
    await call(state.key, 'DELETE', `/v1/sessions/${state.session.id}/files/${encodePath(path)}`);
  } catch (e) {
    showError(e);
  }
  await refreshFiles();
}

// --- wiring -----------------------------------------------------------------

function init() {
  $('key-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const key = $('key').value.trim();
    if (!key) {
      showMessage('Enter an API key.');
      return;
    }
    try {
      await connect(key);
      $('key').value = '';
    } catch (e) {
      forgetKey();
      showError(e);
    }
  });
  $('forget').addEventListener('click', () => {
    forgetKey();
    state.session = null;
    renderSession();
  });
  $('start').addEventListener('click', () => startSession());
  $('interrupt').addEventListener('click', () => interrupt());
  $('restart').addEventListener('click', () => restartSession());
  $('delete').addEventListener('click', () => deleteSession(false));
  $('add-cell').addEventListener('click', () => addCell().focus());

  const drop = $('dropzone');
  drop.addEventListener('dragover', (ev) => {
    ev.preventDefault();
    drop.classList.add('over');
  });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (ev) => {
    ev.preventDefault();
    drop.classList.remove('over');
    if (ev.dataTransfer && ev.dataTransfer.files.length) uploadFiles(ev.dataTransfer.files);
  });
  $('file-input').addEventListener('change', (ev) => {
    uploadFiles(ev.target.files);
    ev.target.value = '';
  });
  $('refresh-files').addEventListener('click', () => refreshFiles());

  addCell('print("hello from kiln")');
  renderSession();
  if (state.key) connect(state.key).catch((e) => {
    forgetKey();
    showError(e);
  });
}

init();
