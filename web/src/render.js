// Rendering what a sandbox produced. All of it is untrusted: text is set as
// text; HTML (a DataFrame's table, a display(HTML(...))) goes through
// DOMPurify with scripts, event handlers, styles, forms, frames and remote
// images removed, and the page's Content-Security-Policy (script-src 'self',
// no inline script) stands behind it; images are data: URLs of the image
// types only, and SVG is shown through <img>, where its scripts never run.
import DOMPurify from 'dompurify';

import { el } from './api.js';

const purifier = DOMPurify(window);
purifier.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'IMG') {
    const src = node.getAttribute('src') || '';
    if (!/^data:image\/(png|jpeg|gif|webp);base64,/i.test(src)) node.removeAttribute('src');
  }
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

const SANITIZE = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'frame',
    'object', 'embed', 'link', 'meta', 'base', 'video', 'audio', 'source', 'picture'],
  FORBID_ATTR: ['style', 'srcset', 'action', 'formaction', 'ping'],
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

export function sanitizedHtml(html) {
  return purifier.sanitize(String(html), SANITIZE);
}

// Terminal colours in tracebacks and output are dropped, not interpreted.
export function stripAnsi(s) {
  return String(s).replace(/\x1b\[[0-9;?]*[ -/]*[@-~]/g, '');
}

function asText(v) {
  return Array.isArray(v) ? v.join('') : String(v ?? '');
}

const BASE64 = /^[A-Za-z0-9+/=\s]*$/;

function image(mime, data, metadata) {
  const b64 = asText(data).replace(/\s+/g, '');
  if (!BASE64.test(b64)) return el('pre', { class: 'out-text' }, `[${mime}: not base64]`);
  const img = el('img', { class: 'out-image', alt: `${mime} output`, src: `data:${mime};base64,${b64}` });
  const m = (metadata && metadata[mime]) || {};
  if (Number.isFinite(m.width)) img.width = m.width;
  if (Number.isFinite(m.height)) img.height = m.height;
  return img;
}

function svg(data) {
  const text = asText(data);
  const bytes = new TextEncoder().encode(text);
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  return el('img', { class: 'out-image', alt: 'image/svg+xml output', src: `data:image/svg+xml;base64,${btoa(bin)}` });
}

// One mime bundle ({"text/html": ..., "image/png": ..., "text/plain": ...})
// as the richest type it has.
export function mimeBundle(data, metadata) {
  data = data || {};
  if (data['text/html'] !== undefined) {
    const box = el('div', { class: 'out-html' });
    box.append(sanitizedHtml(asText(data['text/html'])));
    return box;
  }
  for (const mime of ['image/png', 'image/jpeg', 'image/gif', 'image/webp']) {
    if (data[mime] !== undefined) return image(mime, data[mime], metadata);
  }
  if (data['image/svg+xml'] !== undefined) return svg(data['image/svg+xml']);
  if (data['application/json'] !== undefined) {
    return el('pre', { class: 'out-text' }, JSON.stringify(data['application/json'], null, 2));
  }
  for (const mime of ['text/markdown', 'text/latex', 'text/plain']) {
    if (data[mime] !== undefined) return el('pre', { class: 'out-text' }, stripAnsi(asText(data[mime])));
  }
  const types = Object.keys(data);
  return el('pre', { class: 'out-text muted' }, types.length ? `[no renderer for ${types.join(', ')}]` : '[empty output]');
}

export function errorOutput(e) {
  const box = el('div', { class: 'out-error' });
  box.append(el('div', { class: 'out-error-head' }, `${e.ename || 'Error'}: ${e.evalue ?? ''}`));
  const tb = Array.isArray(e.traceback) ? e.traceback : [];
  if (tb.length) box.append(el('pre', { class: 'out-traceback' }, stripAnsi(tb.join('\n'))));
  return box;
}

// The output area of a cell: stream text is appended as it arrives (stdout
// and stderr each into their current block), rich outputs after it.
export class OutputArea {
  constructor(root) {
    this.root = root;
    this.lastStream = null;
    this.lastName = null;
  }
  clear() {
    this.root.replaceChildren();
    this.lastStream = null;
    this.lastName = null;
  }
  text(name, text) {
    if (!this.lastStream || this.lastName !== name) {
      this.lastStream = el('pre', { class: `out-stream out-${name}` });
      this.lastName = name;
      this.root.append(this.lastStream);
    }
    this.lastStream.append(document.createTextNode(stripAnsi(text)));
  }
  rich(node) {
    this.lastStream = null;
    this.root.append(node);
  }
  // An SSE event of a cell (docs/api.md, "Streaming").
  event(name, data) {
    if (name === 'stdout' || name === 'stderr') this.text(name, data.text ?? '');
    else if (name === 'display' || name === 'result') this.rich(mimeBundle(data.data, data.metadata));
    else if (name === 'error') this.rich(errorOutput(data));
  }
  // The outputs of a whole (non-streamed) result.
  outputs(list) {
    for (const o of list || []) {
      if (o.output_type === 'stream') this.text(o.name === 'stderr' ? 'stderr' : 'stdout', asText(o.text));
      else if (o.output_type === 'display_data' || o.output_type === 'execute_result') {
        this.rich(mimeBundle(o.data, o.metadata));
      } else if (o.output_type === 'error') this.rich(errorOutput(o));
    }
  }
}

// What a cell's result means, in one sentence for a person (docs/api.md:
// statuses, session_state).
export function explainResult(r) {
  const state = r.session_state;
  const kept = 'the session and its variables are kept';
  const lost = 'the sandbox was killed and the session is gone (its variables are lost): start a new session';
  const tail = state === 'lost' ? lost : state === 'kept' ? kept : '';
  const reason = r.reason ? ` (${r.reason})` : '';
  switch (r.status) {
    case 'ok': return '';
    case 'error': {
      const err = r.error || {};
      return `The cell raised ${err.name || 'an exception'}; ${kept}.`;
    }
    case 'interrupted': return `Interrupted (KeyboardInterrupt); ${kept}.`;
    case 'timeout':
      return state === 'lost'
        ? `Timed out and did not stop when interrupted: ${lost}.`
        : `Timed out: the cell was interrupted; ${kept}.`;
    case 'memory_limit': return `Over the memory limit${reason}: ${tail || lost}.`;
    case 'cpu_limit': return `Over the CPU-time limit${reason}: ${tail || lost}.`;
    case 'output_limit': return `Over the output limit${reason}: ${tail || lost}.`;
    case 'policy_violation': return `Refused by the profile's policy${reason}${tail ? `; ${tail}` : ''}.`;
    case 'signaled': return `Killed by a signal${reason}${tail ? `; ${tail}` : ''}.`;
    case 'cancelled': return `Cancelled${reason}.`;
    default: return `${r.status}${reason}${tail ? `; ${tail}` : ''}.`;
  }
}
