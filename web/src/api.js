// The public HTTP API of kiln (docs/api.md), as the pages use it: the key is
// sent only as a header (Authorization: Bearer), never in a URL; it is kept in
// sessionStorage (this tab only, gone when the tab closes).

const KEY_ITEM = 'kiln.key';

export function storedKey() {
  return sessionStorage.getItem(KEY_ITEM) || '';
}
export function storeKey(key) {
  if (key) sessionStorage.setItem(KEY_ITEM, key);
  else sessionStorage.removeItem(KEY_ITEM);
}

// How the pages name a key: its id (kiln_<id>_...), never its secret.
export function keyLabel(key) {
  const m = /^(kiln_[0-9a-f]{12})_/.exec(key);
  return m ? `key ${m[1]}` : 'key';
}

// An error the API answered ({"error": {code, message, field}}), or a network
// failure (status 0).
export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field || null;
  }
  // One line for a person.
  describe() {
    if (this.status === 0) return `The server could not be reached: ${this.message}`;
    if (this.status === 401) {
      return 'The server refused this API key (401 unauthenticated). Check the key: `make serve` ' +
        'prints one on its first start; `kiln keys create --tenant NAME` makes another.';
    }
    let s = `${this.status} ${this.code}: ${this.message}`;
    if (this.field) s += ` (field: ${this.field})`;
    return s;
  }
}

function headers(key, extra) {
  const h = new Headers(extra || {});
  if (key) h.set('Authorization', `Bearer ${key}`);
  return h;
}

async function errorOf(res) {
  let code = `http_${res.status}`;
  let message = res.statusText || 'request failed';
  let field = null;
  const text = await res.text().catch(() => '');
  try {
    const body = JSON.parse(text);
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
      field = body.error.field || null;
    } else if (body && body.detail) {
      message = String(body.detail);
    }
  } catch {
    if (text) message = text.slice(0, 300);
  }
  return new ApiError(res.status, code, message, field);
}

// fetch() against the API with the key; JSON in and out. Throws ApiError.
export async function call(key, method, path, { json, body, accept, raw } = {}) {
  const h = headers(key, accept ? { Accept: accept } : {});
  let payload = body;
  if (json !== undefined) {
    h.set('Content-Type', 'application/json');
    payload = JSON.stringify(json);
  }
  let res;
  try {
    res = await fetch(path, { method, headers: h, body: payload, cache: 'no-store' });
  } catch (e) {
    throw new ApiError(0, 'network', String(e && e.message ? e.message : e));
  }
  if (!res.ok) throw await errorOf(res);
  if (raw) return res;
  if (res.status === 204) return null;
  const type = res.headers.get('Content-Type') || '';
  return type.includes('application/json') ? res.json() : res.text();
}

// A POST whose answer is a Server-Sent Events stream (docs/api.md,
// "Streaming"): onEvent(name, data) for each event as it arrives. Resolves to
// the data of the final `done` event. A request refused before anything ran
// gets its ordinary JSON error: ApiError.
export async function stream(key, path, json, onEvent, signal) {
  const h = headers(key, { Accept: 'text/event-stream', 'Content-Type': 'application/json' });
  let res;
  try {
    res = await fetch(path, { method: 'POST', headers: h, body: JSON.stringify(json), signal, cache: 'no-store' });
  } catch (e) {
    throw new ApiError(0, 'network', String(e && e.message ? e.message : e));
  }
  if (!res.ok) throw await errorOf(res);
  const type = res.headers.get('Content-Type') || '';
  if (!type.includes('text/event-stream')) {
    const body = await res.json();
    onEvent('done', body);
    return body;
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let done = null;
  for (;;) {
    const { value, done: end } = await reader.read();
    if (end) break;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) name = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      let parsed = null;
      try {
        parsed = JSON.parse(data.join('\n'));
      } catch {
        continue;
      }
      if (name === 'done') done = parsed;
      onEvent(name, parsed);
    }
  }
  if (!done) throw new ApiError(0, 'stream_ended', 'the event stream ended without a done event');
  return done;
}

// Percent-encodes each component of a workspace path.
export function encodePath(path) {
  return path.split('/').map(encodeURIComponent).join('/');
}

export function formatBytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB'];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}

export function formatMs(ms) {
  if (ms === null || ms === undefined) return '–';
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Number(ms).toFixed(1)} ms`;
}

// A small element builder: el('div', {class: 'x'}, 'text', child). Text is
// always text (textContent), never parsed as HTML.
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}
