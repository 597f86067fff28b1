// The operator console (served at /console): live charts from GET /v1/stats,
// the host's layers from GET /readyz, and, with an admin key (kiln keys create
// --admin), security events, tenants and the lockdown switch
// (GET /v1/admin/events, GET /v1/admin/tenants, GET and POST
// /v1/admin/lockdown: docs/api.md, "Operator controls"). A tenant's key gets
// 404 on those routes: the panels stay hidden and the console says why. Only
// the public API.
import 'uplot/dist/uPlot.min.css';
import './style.css';

import uPlot from 'uplot';

import { ApiError, call, el, keyLabel, formatMs, storeKey, storedKey } from './api.js';

const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;
const POINTS = 180; // three minutes at one poll a second

// Statuses grouped for the rate chart (docs/api.md lists them all).
const GROUPS = [
  ['ok', ['ok'], '#16a34a'],
  ['error', ['error'], '#dc2626'],
  ['timeout', ['timeout'], '#ea580c'],
  ['interrupted', ['interrupted', 'cancelled'], '#a16207'],
  ['limits', ['memory_limit', 'cpu_limit', 'output_limit', 'signaled'], '#7c3aed'],
  ['policy', ['policy_violation'], '#db2777'],
  ['other', null, '#64748b'],
  ['rejected', 'rejections', '#0f172a'],
];

const state = {
  key: storedKey(),
  timer: null,
  prev: null, // the last stats and when
  series: { t: [], rate: GROUPS.map(() => []), p50: [], p90: [], p99: [], active: [], queued: [], sessions: [], ready: [], refilling: [], inUse: [] },
  charts: {},
  admin: { events: false, tenants: false },
  lastAdminPoll: 0,
  lastReadyz: 0,
};

function showMessage(text, kind = 'error') {
  const box = $('message');
  box.textContent = text;
  box.className = `message ${kind}`;
  box.hidden = !text;
}
function showError(e) {
  showMessage(e instanceof ApiError ? e.describe() : String(e && e.message ? e.message : e));
}

function sum(obj) {
  return Object.values(obj || {}).reduce((a, b) => a + (Number(b) || 0), 0);
}

// Executions of each group so far (counters), from stats.executions and stats.rejections.
function groupCounts(stats) {
  const byStatus = stats.executions || {};
  const named = new Set(GROUPS.flatMap(([, s]) => (Array.isArray(s) ? s : [])));
  return GROUPS.map(([, statuses]) => {
    if (statuses === 'rejections') return sum(stats.rejections);
    if (statuses === null) {
      return Object.entries(byStatus).filter(([k]) => !named.has(k)).reduce((a, [, v]) => a + v, 0);
    }
    return statuses.reduce((a, s) => a + (byStatus[s] || 0), 0);
  });
}

function poolTotals(stats) {
  const profiles = (stats.pool && stats.pool.profiles) || {};
  const t = { ready: 0, refilling: 0, in_use: 0 };
  for (const p of Object.values(profiles)) {
    t.ready += p.ready || 0;
    t.refilling += p.refilling || 0;
    t.in_use += p.in_use || 0;
  }
  return t;
}

function push(arr, v) {
  arr.push(v);
  if (arr.length > POINTS) arr.shift();
}

// --- charts -------------------------------------------------------------------

function chartSize(id) {
  const w = Math.max(320, $(id).clientWidth || 480);
  return { width: w, height: 200 };
}

function makeChart(id, series, yLabel) {
  const opts = {
    ...chartSize(id),
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
    axes: [{}, { label: yLabel, size: 56 }],
    series: [{}, ...series.map(([label, color]) => ({ label, stroke: color, width: 2, spanGaps: false }))],
    legend: { live: true },
  };
  return new uPlot(opts, [[], ...series.map(() => [])], $(id));
}

function initCharts() {
  state.charts.rate = makeChart('chart-rate', GROUPS.map(([l, , c]) => [l, c]), 'per s');
  state.charts.latency = makeChart('chart-latency', [['p50', '#2563eb'], ['p90', '#ea580c'], ['p99', '#dc2626']], 'ms');
  state.charts.load = makeChart('chart-load', [['active', '#2563eb'], ['queued', '#dc2626'], ['sessions', '#16a34a']], 'count');
  state.charts.pool = makeChart('chart-pool', [['ready', '#16a34a'], ['refilling', '#ea580c'], ['in use', '#2563eb']], 'sandboxes');
  window.addEventListener('resize', () => {
    for (const [name, chart] of Object.entries(state.charts)) chart.setSize(chartSize(`chart-${name}`));
  });
}

function redraw() {
  const s = state.series;
  state.charts.rate.setData([s.t, ...s.rate]);
  state.charts.latency.setData([s.t, s.p50, s.p90, s.p99]);
  state.charts.load.setData([s.t, s.active, s.queued, s.sessions]);
  state.charts.pool.setData([s.t, s.ready, s.refilling, s.inUse]);
}

// --- panels -------------------------------------------------------------------

function tile(label, value, kind) {
  return el('div', { class: `tile ${kind || ''}` }, el('div', { class: 'tile-value' }, value), el('div', { class: 'tile-label' }, label));
}

function renderTiles(stats) {
  const pool = poolTotals(stats);
  const lat = stats.latency_ms || {};
  $('tiles').replaceChildren(
    tile('ready', stats.ready ? 'yes' : 'no', stats.ready ? 'good' : 'bad'),
    tile('active / concurrency', `${stats.active} / ${stats.concurrency}`),
    tile('queued / queue', `${stats.queued} / ${stats.queue}`, stats.queued > 0 ? 'warn' : ''),
    tile('live sessions', `${stats.sessions_live ?? '–'}`),
    tile('executions', `${sum(stats.executions)}`),
    tile('rejected', `${sum(stats.rejections)}`, sum(stats.rejections) > 0 ? 'warn' : ''),
    tile('p50 / p99 (60 s)', lat.count ? `${formatMs(lat.p50)} / ${formatMs(lat.p99)}` : '–'),
    tile('pool ready', `${pool.ready}`),
  );
}

function table(id, columns, rows) {
  const t = $(id);
  t.replaceChildren(el('tr', {}, ...columns.map((c) => el('th', {}, c))));
  for (const r of rows) t.append(el('tr', {}, ...r.map((v) => el('td', {}, v ?? '–'))));
}

function renderPool(stats) {
  const pool = stats.pool || {};
  if (pool.error) {
    table('pool-table', ['pool'], [[`the spawner did not answer: ${pool.error}`]]);
    return;
  }
  if (!pool.enabled) {
    table('pool-table', ['pool'], [[`off${pool.reason ? `: ${pool.reason}` : ''}`]]);
    return;
  }
  const rows = Object.entries(pool.profiles || {}).map(([name, p]) => [
    name, p.zygote_ready ? 'yes' : 'no', p.ready, p.refilling, p.in_use, p.target, p.hits, p.cold_fallbacks,
    p.last_refill_ms !== undefined ? formatMs(p.last_refill_ms) : '–', p.failures,
  ]);
  table('pool-table', ['profile', 'zygote', 'ready', 'refilling', 'in use', 'target', 'hits', 'cold', 'last refill', 'failures'], rows);
}

async function refreshReadyz() {
  // /readyz answers 503 with the same body when the node is not ready.
  let body;
  try {
    const res = await fetch('/readyz', { cache: 'no-store' });
    body = await res.json();
  } catch (e) {
    table('layers-table', ['readyz'], [[`unreachable: ${e.message}`]]);
    return;
  }
  const rows = (body.layers || []).map((l) => [l.name, l.state, l.required ? 'required' : 'optional', l.detail]);
  if (body.spawner) rows.unshift(['spawner', body.spawner, 'required', 'being restarted']);
  table('layers-table', ['layer', 'state', '', 'detail'], rows);
}

// The admin routes (the admin role's issue): a panel per route that answers.
async function probeAdmin(path) {
  try {
    return { ok: true, body: await call(state.key, 'GET', path) };
  } catch (e) {
    if (e instanceof ApiError && (e.status === 404 || e.status === 403 || e.status === 405)) return { ok: false, status: e.status };
    throw e;
  }
}

function listOf(body, name) {
  if (Array.isArray(body)) return body;
  if (body && Array.isArray(body[name])) return body[name];
  return [];
}

function text(v) {
  if (v === null || v === undefined) return '–';
  return typeof v === 'object' ? JSON.stringify(v) : String(v);
}

// Event: {id, at, kind, tenant, key_id, execution_id, session_id, client_addr, detail}.
function renderEvents(body) {
  const events = listOf(body, 'events').slice(0, 50);
  table('events-table', ['time', 'kind', 'tenant', 'detail'], events.map((e) => [
    text(e.at), text(e.kind), text(e.tenant), text(e.detail),
  ]));
}

// Tenant: {tenant, keys, admin_keys, revoked_keys, sessions, executions_24h, rejected_24h,
// events_24h, last_execution, quarantine: {since, reason, by} | null}.
function renderTenants(body) {
  const tenants = listOf(body, 'tenants');
  table('tenants-table', ['tenant', 'keys', 'sessions', 'executions (24 h)', 'rejected (24 h)', 'events (24 h)', 'quarantine'],
    tenants.map((t) => [
      text(t.tenant), text(t.keys), text(t.sessions), text(t.executions_24h), text(t.rejected_24h), text(t.events_24h),
      t.quarantine ? `since ${t.quarantine.since}: ${t.quarantine.reason || '(no reason)'}` : '–',
    ]));
}

// {on, reason, since, by}.
function renderLockdown(l) {
  const on = !!(l && l.on);
  const reason = l && l.reason ? ` (${l.reason})` : '';
  const since = l && l.since ? ` since ${l.since}` : '';
  $('lockdown-state').textContent = on ? `Locked down${since}${reason}: new executions and sessions are refused.` : 'Not locked down.';
  $('lockdown-panel').dataset.on = on ? 'true' : 'false';
}

async function refreshAdmin(first) {
  const events = await probeAdmin('/v1/admin/events');
  const tenants = await probeAdmin('/v1/admin/tenants');
  const lockdown = await probeAdmin('/v1/admin/lockdown');
  state.admin.events = events.ok;
  state.admin.tenants = tenants.ok;
  $('events-panel').hidden = !events.ok;
  $('tenants-panel').hidden = !tenants.ok;
  $('lockdown-panel').hidden = !lockdown.ok;
  if (events.ok) renderEvents(events.body);
  if (tenants.ok) renderTenants(tenants.body);
  if (lockdown.ok) renderLockdown(lockdown.body);
  if (first) {
    const why = events.status === 404
      ? 'this is not an admin key (a tenant\'s key gets 404 on the admin routes; kiln keys create --admin makes one)'
      : `the admin routes refused this key (${events.status})`;
    $('admin-note').textContent = events.ok || tenants.ok
      ? ''
      : `Security events, tenants and the lockdown switch are hidden: ${why}.`;
  }
}

async function setLockdown(on) {
  try {
    const body = await call(state.key, 'POST', '/v1/admin/lockdown', { json: { on, reason: $('lockdown-reason').value } });
    renderLockdown(body);
    showMessage(on ? 'Lockdown is on.' : 'Lockdown is lifted.', 'info');
    refreshReadyz();
  } catch (e) {
    showError(e);
  }
}

// --- polling ------------------------------------------------------------------

async function poll() {
  let stats;
  try {
    stats = await call(state.key, 'GET', '/v1/stats');
  } catch (e) {
    showError(e);
    if (e instanceof ApiError && e.status === 401) {
      stop();
      return;
    }
    schedule();
    return;
  }
  showMessage('', 'info');
  const now = stats.time_ms / 1000;
  const counts = groupCounts(stats);
  const prev = state.prev;
  const s = state.series;
  push(s.t, now);
  counts.forEach((c, i) => {
    const dt = prev ? now - prev.t : 0;
    push(s.rate[i], prev && dt > 0 ? Math.max(0, (c - prev.counts[i]) / dt) : null);
  });
  const lat = stats.latency_ms || {};
  push(s.p50, lat.count ? lat.p50 : null);
  push(s.p90, lat.count ? lat.p90 : null);
  push(s.p99, lat.count ? lat.p99 : null);
  push(s.active, stats.active);
  push(s.queued, stats.queued);
  push(s.sessions, stats.sessions_live ?? null);
  const pool = poolTotals(stats);
  push(s.ready, pool.ready);
  push(s.refilling, pool.refilling);
  push(s.inUse, pool.in_use);
  state.prev = { t: now, counts };
  redraw();
  renderTiles(stats);
  renderPool(stats);
  const wall = Date.now();
  if (wall - state.lastReadyz > 10000) {
    state.lastReadyz = wall;
    refreshReadyz();
  }
  if ((state.admin.events || state.admin.tenants) && wall - state.lastAdminPoll > 2000) {
    state.lastAdminPoll = wall;
    refreshAdmin(false).catch(showError);
  }
  document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
  schedule();
}

function schedule() {
  clearTimeout(state.timer);
  state.timer = setTimeout(poll, POLL_MS);
}

function stop() {
  clearTimeout(state.timer);
  state.timer = null;
}

async function connect(key) {
  // The first call says whether the key is good.
  await call(key, 'GET', '/v1/stats');
  state.key = key;
  storeKey(key);
  $('key-state').textContent = `${keyLabel(key)} accepted`;
  $('key-form').classList.add('connected');
  $('dashboard').hidden = false;
  if (!state.charts.rate) initCharts();
  await refreshAdmin(true);
  await refreshReadyz();
  state.lastReadyz = Date.now();
  poll();
}

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
      showMessage('', 'info');
    } catch (e) {
      showError(e);
    }
  });
  $('forget').addEventListener('click', () => {
    stop();
    storeKey('');
    state.key = '';
    $('key-state').textContent = '';
    $('key-form').classList.remove('connected');
    $('dashboard').hidden = true;
  });
  $('lockdown-on').addEventListener('click', () => setLockdown(true));
  $('lockdown-off').addEventListener('click', () => setLockdown(false));
  if (state.key) connect(state.key).catch(showError);
}

init();
