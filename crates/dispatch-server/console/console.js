// tooldispatch web console: sessions, live round timelines, confirmations, ask_user answers, todos,
// and a prompt box that runs agent turns when the daemon has a model.
// Every text that comes from events is model-controlled: it only ever goes into text nodes.
'use strict';

const $ = (id) => document.getElementById(id);

// An element with attributes (`on*` functions become listeners) and children (strings → text nodes).
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'style') Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

// --- auth: #token=... is kept for this tab only, then removed from the address bar ---
const hashToken = new URLSearchParams(location.hash.slice(1)).get('token');
if (hashToken) {
  sessionStorage.setItem('tooldispatch-token', hashToken);
  history.replaceState(null, '', location.pathname + location.search);
}
const token = sessionStorage.getItem('tooldispatch-token');

// --- login: #login=<one-time code> (the link `serve --require-token` prints) is traded for an
// HttpOnly cookie that stands for the token in this browser; the code leaves the address bar
// at once, and works only once ---
const loginCode = new URLSearchParams(location.hash.slice(1)).get('login');
if (loginCode) history.replaceState(null, '', location.pathname + location.search);
const loggedIn = !loginCode ? Promise.resolve() : fetch('/v1/console/login', {
  method: 'POST',
  headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify({ code: loginCode }),
}).then(async (res) => {
  if (res.ok) return;
  let msg = res.statusText;
  try { msg = (await res.json()).error.message; } catch { /* not JSON */ }
  showError(`Login failed (${res.status}: ${msg}).`);
}).catch((e) => showError(`Login failed (${e.message}). Is the daemon running?`));

async function api(path, body) {
  const headers = {};
  if (token) headers.Authorization = 'Bearer ' + token;
  const init = { headers };
  if (body !== undefined) {
    init.method = 'POST';
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (!res.ok) {
    const msg = (data && data.error && data.error.message) || text || res.statusText;
    const err = new Error(`${res.status}: ${msg}`);
    err.status = res.status;
    err.code = data && data.error && data.error.code;
    throw err;
  }
  return data;
}

function events(path) {
  const url = token ? `${path}${path.includes('?') ? '&' : '?'}access_token=${encodeURIComponent(token)}` : path;
  return new EventSource(url);
}

function showError(msg) {
  const el = $('error');
  el.textContent = msg;
  el.hidden = !msg;
}

// --- state ---
const S = {
  sessions: [],
  selected: null,
  stream: null,        // the selected session's EventSource
  rounds: [],          // rounds of the selected session, oldest first
  todos: null,
  confirmations: [],
  pending: [],
  agentModels: [],     // the daemon's models (GET /v1/version); none: no prompt box
  agent: { running: false, mine: null, draft: null, waiting: null, finished: new Set() },
};

// The one formatter of a duration (milliseconds): every duration the console shows comes from
// here, unit included, so no caller adds one.
function duration(v) {
  if (typeof v !== 'number' || !Number.isFinite(v)) return '';
  const t = Math.max(0, v);
  if (t < 10) return `${t.toFixed(1)} ms`;
  if (t < 9999.5) return `${Math.round(t)} ms`;
  return `${(t / 1000).toFixed(1)} s`;
}
const ago = (t) => {
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  return s < 60 ? `${s}s ago` : s < 3600 ? `${Math.floor(s / 60)} min ago` : s < 86400 ? `${Math.floor(s / 3600)} h ago` : new Date(t).toLocaleDateString();
};
const clip = (text, n) => (text.length > n ? text.slice(0, n) + '…' : text);
const STATUS_TONE = {
  ok: 'ok', failed: 'bad', invalid: 'bad', timed_out: 'bad', interrupted: 'bad',
  declined: 'warn', refused: 'warn', not_found: 'warn', deduped: 'info',
};
// A result served from the cache starts with its age: "(cached 7 min ago, …" (maybe after "[tool] ").
const isCached = (c) => c.result !== null && /^(\[[^\]\n]*\] )?\(cached/.test(c.result);
const tone = (status) => STATUS_TONE[status] || 'neutral';

// --- sessions ---
async function loadSessions() {
  try {
    S.sessions = (await api('/v1/sessions')).sessions || [];
    renderSessions();
  } catch (e) {
    showError(`Cannot list sessions (${e.message}). Is the daemon running, and is the token right?`);
  }
}

let sessionsTimer = 0;
function loadSessionsSoon() {
  clearTimeout(sessionsTimer);
  sessionsTimer = setTimeout(loadSessions, 150);
}

function renderSessions() {
  const waiting = new Map();
  for (const c of S.confirmations) {
    // A subagent leg's call also counts for its parent, whose user approves it.
    for (const s of new Set([c.session, c.parent_session].filter(Boolean))) waiting.set(s, (waiting.get(s) || 0) + 1);
  }
  const list = $('sessions');
  list.replaceChildren(...S.sessions.map((s) => h('li', {},
    h('button', {
      type: 'button', class: 'session', 'data-testid': `session-${s.id}`,
      'aria-current': s.id === S.selected ? 'true' : null,
      onclick: () => select(s.id),
    },
    h('span', { class: 'session-id' }, s.id),
    waiting.get(s.id) ? h('span', { class: 'badge warn', title: 'calls waiting for approval' }, `${waiting.get(s.id)} waiting`) : null,
    h('span', { class: 'muted small' },
      `${s.rounds} round${s.rounds === 1 ? '' : 's'} · ${ago(s.last_active_ms || s.created_ms)}`,
      s.watchers ? ` · ${s.watchers} watching` : '')))));
  $('no-sessions').hidden = S.sessions.length > 0;
  const cur = S.sessions.find((s) => s.id === S.selected);
  if (cur) $('session-meta').textContent = `${cur.rounds} rounds · created ${new Date(cur.created_ms).toLocaleString()}`;
}

function select(id) {
  if (S.selected === id) return;
  if (S.stream) S.stream.close();
  S.selected = id;
  S.rounds = [];
  S.todos = null;
  S.pending = [];
  $('empty').hidden = true;
  $('session-view').hidden = false;
  $('session-title').textContent = id;
  $('rounds').replaceChildren();
  S.agent = { running: false, mine: null, draft: null, waiting: null, finished: new Set() };
  $('agent-log').replaceChildren();
  agentStatus('');
  setSending(false);
  $('agent-box').hidden = !S.agentModels.length;
  renderSessions();
  renderTodos();
  renderAsks();
  const stream = events(`/v1/sessions/${encodeURIComponent(id)}/events`);
  let opened = false;
  let lastId = '';
  stream.onopen = () => {
    // After a reconnect the daemon replays from the last committed event: drop the live
    // round we had not seen committed, it comes again.
    const r = S.rounds[S.rounds.length - 1];
    if (opened && r && r.live && !r.committed) {
      S.rounds.pop();
      r.el.remove();
    }
    opened = true;
  };
  stream.onmessage = (m) => {
    let ev;
    try { ev = JSON.parse(m.data); } catch { return; }
    // Stored events carry their own id; live ones repeat the last id seen.
    const live = m.lastEventId === lastId;
    lastId = m.lastEventId;
    if (S.selected === id) onSessionEvent(ev, live);
  };
  S.stream = stream;
  loadPending();
}

// --- rounds ---
function newRound() {
  const r = { number: null, run: null, committed: false, calls: new Map(), order: [], lastAt: 0, notes: [], pending: null };
  r.el = h('article', { class: 'round', 'data-testid': 'round' });
  S.rounds.push(r);
  $('rounds').prepend(r.el);
  $('no-rounds').hidden = true;
  return r;
}

function currentRound() {
  // Every committed round ends with RoundCommitted (stored and live): what follows is a new round.
  const r = S.rounds[S.rounds.length - 1];
  return !r || r.committed ? newRound() : r;
}

function callOf(r, id, name) {
  let c = r.calls.get(id);
  if (!c) {
    c = { id, name, args: '', start: null, end: null, skipped: null, status: null, result: null, text: '', confirm: null };
    r.calls.set(id, c);
    r.order.push(id);
  }
  if (name && !c.name) c.name = name;
  return c;
}

function onSessionEvent(ev, live) {
  switch (ev.type) {
    case 'RoundStarted': {
      const r = S.rounds[S.rounds.length - 1];
      if (!r || r.committed || r.order.length) newRound().run = ev.run;
      return;
    }
    case 'ConfirmationRequested': case 'ConfirmationResolved':
      loadConfirmations();
      return;
    case 'AgentStarted': case 'AgentModelCall': case 'AgentModelText': case 'AgentModelRetry':
    case 'AgentModelDone': case 'AgentFinished': case 'AgentFailed':
      onAgentEvent(ev);
      return;
    case 'RoundCommitted':
    case 'Committed': {
      const r = S.rounds[S.rounds.length - 1] || newRound();
      r.committed = true;
      r.number = ev.round;
      r.run = ev.run;
      schedule(r);
      loadPending();
      loadSessionsSoon();
      return;
    }
    default: break;
  }
  const r = currentRound();
  if (live) r.live = true;
  if (typeof ev.at_ms === 'number') r.lastAt = Math.max(r.lastAt, ev.at_ms);
  const c = ev.tool_id ? callOf(r, ev.tool_id, ev.tool_name) : null;
  switch (ev.type) {
    case 'ToolCall': c.args = ev.tool_args; c.checkAt = ev.at_ms; break;
    case 'ToolCallStart': c.start = ev.at_ms; break;
    case 'ToolCallEnd': c.end = ev.at_ms; break;
    case 'ToolProgress': case 'ToolCallText': c.text = (c.text + ev.text).slice(-4000); break;
    case 'ToolSkipped': c.skipped = ev.text; if (!c.args) c.args = ev.tool_args; break;
    case 'ToolConfirm': c.confirm = { text: ev.text, rule: ev.remember_rule }; break;
    case 'ToolResult': c.status = ev.status; c.result = ev.result; if (!c.args) c.args = ev.tool_args; break;
    case 'TodoUpdate': S.todos = ev.todos || []; renderTodos(); break;
    case 'Pending': r.pending = ev.task_hash; loadPending(); break; // the asking call comes with the answer
    case 'ClientToolCall': r.notes.push(['neutral', `handed ${(ev.client_tool_calls || []).length} client tool call(s) back to the caller`]); break;
    case 'Canceled': r.notes.push(['warn', `canceled: ${ev.text}`]); break;
    case 'Error': r.notes.push(['bad', ev.text]); break;
    case 'StoreDegraded': r.notes.push(['warn', ev.text]); break;
    default: break;
  }
  schedule(r);
}

const dirty = new Set();
function schedule(r) {
  if (!dirty.size) requestAnimationFrame(() => { for (const x of dirty) renderRound(x); dirty.clear(); });
  dirty.add(r);
}

// Lane charts are laid out in pixels (labels have a width of their own): lay them out again
// when the timeline's width changes (a resized window, a scroll bar coming or going).
let timelineWidth = -1;
new ResizeObserver((entries) => {
  const w = Math.round(entries[entries.length - 1].contentRect.width);
  if (w === timelineWidth) return;
  timelineWidth = w;
  for (const r of S.rounds) schedule(r);
}).observe($('rounds'));

// --- the lane chart of a round's pass 2 ---
// Each call that ran is a bar from its start to its end, with a label (its name and how long it
// ran): inside the bar when the label fits there, else beside the bar. A call goes in the first
// lane where its bar and its label have room, covering no other call's bar or label; so calls
// that overlap in time never share a lane either. Laid out in pixels of the lanes' width.
const MIN_BAR = 6;     // px: a call too short to see still shows
const LABEL_GAP = 3;   // px between a bar and its label beside it
const LANE_GAP = 4;    // px between what two calls of one lane cover
const LABEL_PAD = 10;  // px the label adds around its text (its padding, and a margin for rounding)

// The places a call's label can take, best first, each with the span [a, b] the call then
// covers: inside its bar when it fits; else after the bar, or before it; and when neither side
// has room (a narrow screen), clipped where the most room is.
function labelPlaces(x0, x1, lw, width) {
  if (x1 - x0 >= lw) return [{ side: 'inside', lx: x0, lw, a: x0, b: x1 }];
  const after = x1 + LABEL_GAP;
  const before = x0 - LABEL_GAP - lw;
  const places = [];
  if (after + lw <= width) places.push({ side: 'after', lx: after, lw, a: x0, b: after + lw });
  if (before >= 0) places.push({ side: 'before', lx: before, lw, a: before, b: x1 });
  if (places.length) return places;
  const roomAfter = Math.max(0, width - after);
  const roomBefore = Math.max(0, x0 - LABEL_GAP);
  const roomInside = x1 - x0;
  const room = Math.max(roomAfter, roomBefore, roomInside);
  if (room === roomInside) return [{ side: 'inside', lx: x0, lw: roomInside, a: x0, b: x1 }];
  if (room === roomAfter) return [{ side: 'after', lx: after, lw: roomAfter, a: x0, b: width }];
  return [{ side: 'before', lx: 0, lw: roomBefore, a: 0, b: x1 }];
}

// Lanes for items { x0, x1, lw } (bar from x0 to x1, label lw wide) in the order of their start:
// sets each item's lane and its label's place (side, lx, lw); returns how many lanes.
function layoutLanes(items, width) {
  const lanes = []; // per lane, the spans [a, b] its calls cover
  const fits = (spans, p) => spans.every(([a, b]) => p.b + LANE_GAP <= a || b + LANE_GAP <= p.a);
  for (const it of items) {
    const places = labelPlaces(it.x0, it.x1, it.lw, width);
    let lane = -1;
    let place = places[0];
    for (let i = 0; i < lanes.length && lane < 0; i++) {
      const p = places.find((q) => fits(lanes[i], q));
      if (p) { lane = i; place = p; }
    }
    if (lane < 0) { lane = lanes.length; lanes.push([]); }
    lanes[lane].push([place.a, place.b]);
    Object.assign(it, { lane, side: place.side, lx: place.lx, lw: place.lw });
  }
  return lanes.length;
}

// The width of the text of a label (11px in the page's font), measured on a canvas.
let measureCtx = null;
function labelMeasure() {
  if (!measureCtx) measureCtx = document.createElement('canvas').getContext('2d');
  measureCtx.font = `11px ${getComputedStyle(document.body).fontFamily}`;
  return (text) => measureCtx.measureText(text).width;
}

// The width of a round's lanes: its box's content width; 0 while it is not shown.
function laneWidth(r) {
  const cs = getComputedStyle(r.el);
  const w = r.el.getBoundingClientRect().width - ['paddingLeft', 'paddingRight', 'borderLeftWidth', 'borderRightWidth']
    .reduce((sum, k) => sum + (parseFloat(cs[k]) || 0), 0);
  return w > 0 ? Math.floor(w) : 0;
}

// Lays out the calls that ran (sets c.lane) and returns the chart, or null when none ran.
function laneChart(r, calls, total) {
  const width = laneWidth(r) || 600; // not shown yet: laid out again when it is (see the ResizeObserver)
  const measure = labelMeasure();
  const items = calls.filter((c) => c.start !== null).sort((a, b) => a.start - b.start).map((c) => {
    const end = c.end === null ? total : Math.max(c.end, c.start);
    const x0 = Math.max(0, Math.min((c.start / total) * width, width - MIN_BAR));
    const x1 = Math.min(width, Math.max(x0 + MIN_BAR, (end / total) * width));
    const text = `${c.name || '?'} ${duration(end - c.start)}`;
    return { c, end, x0, x1, text, lw: Math.min(width, Math.ceil(measure(text)) + LABEL_PAD) };
  });
  const laneCount = layoutLanes(items, width);
  for (const c of calls) c.lane = undefined;
  for (const it of items) it.c.lane = it.lane;
  if (!laneCount) return null;

  const pct = (x) => `${(x / width) * 100}%`;
  const lanes = [];
  for (let i = 0; i < laneCount; i++) lanes.push(h('div', { class: 'lane', 'data-lane': i }));
  for (const it of items) {
    const { c, end } = it;
    const cached = isCached(c);
    // A finished round has no running call: one that never ended is shown as such.
    const status = c.status || (c.end !== null ? 'ended' : r.committed ? 'unfinished' : 'running');
    const title = `${c.name} ${c.id}: ${duration(c.start)} → ${c.end === null ? status : duration(c.end)} (${duration(end - c.start)})`;
    lanes[it.lane].append(
      h('div', {
        class: `bar ${c.status ? tone(c.status) : status === 'running' ? 'running' : 'neutral'}${cached ? ' cached' : ''}`,
        'data-testid': `call-${c.id}`, 'data-status': status, 'data-lane': it.lane, 'data-cached': cached ? 'true' : null,
        title, style: { left: pct(it.x0), width: pct(it.x1 - it.x0) },
      }),
      h('span', {
        class: `bar-label ${it.side}`, 'data-testid': `label-${c.id}`, 'data-lane': it.lane, title,
        style: { left: pct(it.lx), width: `${it.lw}px` },
      }, it.text));
  }
  // Pass 2 runs the calls; the round is finished once it is committed (its results written).
  const running = !r.committed && items.some((it) => it.c.end === null);
  const state = r.committed ? 'done' : running ? 'running' : 'ran';
  const stateText = state === 'running' ? 'Pass 2 · running' : 'Pass 2 · done';
  const lanesText = `${laneCount} lane${laneCount === 1 ? '' : 's'}`;
  return h('div', { class: 'chart', role: 'group', 'data-testid': 'chart', 'data-state': state, 'aria-label': `${stateText}${state === 'done' ? ', round finished' : ''}: ${lanesText} of calls` },
    h('div', { class: 'chart-head muted small' },
      h('span', { 'data-testid': 'chart-state' }, stateText),
      h('span', {}, lanesText),
      h('span', {}, state === 'done' ? `finished in ${duration(total)}` : duration(total))),
    lanes);
}

function renderRound(r) {
  const calls = r.order.map((id) => r.calls.get(id));
  const total = Math.max(r.lastAt, 1);
  const counts = {};
  for (const c of calls) if (c.status) counts[c.status] = (counts[c.status] || 0) + 1;

  const settled = r.committed || r.pending || (calls.length > 0 && calls.every((c) => c.status));
  const which = r.number ? `round ${r.number}` : settled ? 'round' : 'round (running)';
  const title = r.run ? `Run ${r.run} · ${which}` : which[0].toUpperCase() + which.slice(1);
  const waiting = r.pending && S.pending.some((t) => t.task === r.pending);
  const head = h('header', { class: 'round-head' },
    h('h4', {}, title),
    h('span', { class: 'muted small' }, [`${calls.length} call${calls.length === 1 ? '' : 's'}`, duration(r.lastAt)].filter(Boolean).join(' · ')),
    settled ? null : h('span', { class: 'badge live' }, 'live'),
    r.pending ? h('span', { class: `badge ${waiting ? 'warn' : 'neutral'}` }, waiting ? 'waiting on the user' : 'answered; the answer is the next round') : null,
    h('span', { class: 'counts' }, Object.entries(counts).map(([s, n]) => h('span', { class: `chip ${tone(s)}` }, `${n} ${s}`))));

  const chart = laneChart(r, calls, total);

  const rows = calls.map((c, i) => {
    const cached = isCached(c);
    const chip = (t, label, title) => h('span', { class: `chip ${t}`, title }, label);
    const check = c.skipped !== null ? chip('warn', c.confirm ? 'declined' : 'stopped', c.skipped)
      : c.checkAt !== undefined || c.start !== null ? chip('ok', c.confirm ? 'approved' : 'passed', c.confirm && c.confirm.text)
        : c.status === 'deduped' ? chip('info', 'remembered', 'the same call already had a result in this run')
          : c.status === 'not_run' ? chip('neutral', 'not run')
            : c.status ? chip('warn', 'stopped')
              : c.confirm ? chip('neutral', 'asking…', c.confirm.text) : h('span', { class: 'muted' }, '…');
    const run = c.start === null ? h('span', { class: 'muted' }, '—')
      : h('span', {}, c.end !== null ? duration(c.end - c.start) : r.committed ? 'did not end' : 'running…', h('span', { class: 'muted small' }, ` lane ${c.lane + 1}`));
    const result = c.status ? h('span', { class: `chip ${tone(c.status)}`, 'data-testid': 'result-status' }, c.status)
      : h('span', { class: 'muted' }, c.start !== null && c.end === null && !r.committed ? 'running' : 'pending');
    const details = h('details', { class: 'call-details' },
      h('summary', {}, 'details'),
      c.args ? h('div', {}, h('div', { class: 'label' }, 'arguments'), h('pre', {}, clip(c.args, 4000))) : null,
      c.skipped !== null ? h('div', {}, h('div', { class: 'label' }, 'pass 1'), h('pre', {}, clip(c.skipped, 4000))) : null,
      c.confirm ? h('div', {}, h('div', { class: 'label' }, 'needed approval'), h('pre', {}, c.confirm.text)) : null,
      c.text ? h('div', {}, h('div', { class: 'label' }, 'output while running'), h('pre', {}, c.text)) : null,
      c.result !== null ? h('div', {}, h('div', { class: 'label' }, 'result'), h('pre', {}, clip(c.result, 20000))) : null);
    return h('li', { class: 'call', 'data-testid': `row-${c.id}`, 'data-status': c.status || 'pending' },
      h('span', { class: 'call-name' }, h('span', { class: 'n muted' }, `${i + 1}`), h('strong', {}, c.name || '?'), h('code', { class: 'muted small' }, c.id),
        c.status === 'deduped' ? h('span', { class: 'tag', title: 'the same call already had a result in this run' }, 'dedup') : null,
        cached ? h('span', { class: 'tag', title: 'served from the result cache' }, 'cached') : null),
      h('span', { class: 'cell' }, check), h('span', { class: 'cell' }, run), h('span', { class: 'cell' }, result),
      h('span', { class: 'preview muted small' }, c.result !== null ? clip(c.result.replace(/\s+/g, ' '), 160) : c.skipped !== null ? clip(c.skipped.replace(/\s+/g, ' '), 160) : ''),
      details);
  });
  // Keep open details open across re-renders.
  const open = new Set([...r.el.querySelectorAll('details[open]')].map((d) => d.closest('li').dataset.testid));
  r.el.replaceChildren(...[head, chart,
    ...r.notes.map(([t, text]) => h('p', { class: `note ${t}` }, text)),
    r.pending && !calls.length ? h('p', { class: 'muted small' }, `ask_user parked the run (task ${r.pending}); the other calls of this reply did not run.`) : null,
    calls.length ? h('div', { class: 'calls-head muted small', 'aria-hidden': 'true' }, h('span', {}, 'call'), h('span', {}, '1 · check'), h('span', {}, '2 · run'), h('span', {}, '3 · result')) : null,
    h('ol', { class: 'calls' }, rows)].filter(Boolean));
  for (const d of r.el.querySelectorAll('details')) if (open.has(d.closest('li').dataset.testid)) d.open = true;
}

function renderTodos() {
  const todos = S.todos || [];
  const mark = { completed: '✓', in_progress: '▸', pending: '○' };
  $('todos').replaceChildren(...todos.map((t) => h('li', { class: `todo ${t.status}`, 'data-status': t.status },
    h('span', { class: 'todo-mark', 'aria-hidden': 'true' }, mark[t.status] || '○'),
    h('span', {}, t.status === 'in_progress' && t.active_form ? t.active_form : t.content),
    h('span', { class: 'visually-hidden' }, ` (${t.status.replace('_', ' ')})`))));
  $('no-todos').hidden = todos.length > 0;
}

// --- confirmations ---
async function loadConfirmations() {
  try {
    S.confirmations = (await api('/v1/confirmations')).confirmations || [];
  } catch (e) {
    showError(`Cannot list confirmations (${e.message}).`);
    return;
  }
  renderConfirmations();
  renderSessions();
}

function renderConfirmations() {
  const box = $('confirmations');
  const keep = new Set(S.confirmations.map((c) => c.id));
  for (const card of [...box.children]) if (!keep.has(card.dataset.id)) card.remove();
  for (const c of S.confirmations) {
    if (box.querySelector(`[data-id="${CSS.escape(c.id)}"]`)) continue;
    box.append(confirmationCard(c));
  }
  updateAttention();
}

function confirmationCard(c) {
  const uid = `c-${Math.random().toString(36).slice(2)}`;
  const status = h('p', { class: 'small', role: 'status' });
  const reason = h('input', { type: 'text', id: `${uid}-reason`, placeholder: 'optional; the model reads it' });
  const remember = h('input', { type: 'checkbox', id: `${uid}-remember` });
  const turn = h('input', { type: 'checkbox', id: `${uid}-turn` });
  const expires = h('span', { class: 'muted small expires' });
  const buttons = [];
  const answer = async (approve) => {
    buttons.forEach((b) => { b.disabled = true; });
    status.textContent = approve ? 'Approving…' : 'Declining…';
    try {
      await api(`/v1/confirmations/${encodeURIComponent(c.id)}`, {
        approve, reason: reason.value || undefined, remember: approve && remember.checked, allow_turn: approve && turn.checked,
      });
      card.remove();
      updateAttention();
    } catch (e) {
      status.textContent = e.code === 'no_such_confirmation'
        ? 'This request was already answered or has expired.' : `Could not send the answer: ${e.message}`;
      buttons.forEach((b) => { b.disabled = false; });
    }
  };
  buttons.push(h('button', { type: 'button', class: 'primary', 'data-testid': 'approve', onclick: () => answer(true) }, 'Approve'));
  buttons.push(h('button', { type: 'button', class: 'danger', 'data-testid': 'decline', onclick: () => answer(false) }, 'Decline'));
  const card = h('article', { class: 'card confirm', 'data-testid': 'confirmation', 'data-id': c.id, 'data-session': c.session, 'aria-label': `Approve ${c.tool_name}?` },
    h('header', {}, h('strong', {}, `${c.tool_name}`), h('span', { class: 'muted small', 'data-testid': 'confirm-where' }, c.parent_session
      ? ` wants to run · subagent ${c.session} of session ${c.parent_session} · call ${c.tool_id}`
      : ` wants to run · session ${c.session} · call ${c.tool_id}`), expires),
    h('p', { class: 'why' }, c.why),
    h('pre', { class: 'args' }, clip(c.tool_args || '', 3000)),
    h('div', { class: 'opts' },
      h('label', { class: 'check' }, remember, ' remember: ', h('code', { 'data-testid': 'remember-rule' }, c.remember_rule || '(no rule)')),
      h('label', { class: 'check' }, turn, ' allow everything else for this turn')),
    h('div', { class: 'field' }, h('label', { for: `${uid}-reason` }, 'Reason'), reason),
    h('div', { class: 'actions' }, buttons), status);
  const tick = () => {
    if (!card.isConnected) return clearInterval(timer);
    const left = Math.max(0, Math.round((c.expires_ms - Date.now()) / 1000));
    expires.textContent = c.expires_ms ? ` · declined in ${Math.floor(left / 60)}:${String(left % 60).padStart(2, '0')}` : '';
  };
  const timer = setInterval(tick, 1000);
  tick();
  return card;
}

// --- ask_user ---
async function loadPending() {
  const id = S.selected;
  if (!id) return;
  try {
    const tasks = (await api(`/v1/sessions/${encodeURIComponent(id)}/pending`)).tasks || [];
    if (S.selected === id) {
      S.pending = tasks;
      renderAsks();
      for (const r of S.rounds) if (r.pending) schedule(r);
    }
  } catch (e) {
    showError(`Cannot read what session ${id} waits on (${e.message}).`);
  }
}

function renderAsks() {
  const box = $('asks');
  const keep = new Set(S.pending.map((t) => t.task));
  for (const f of [...box.children]) if (!keep.has(f.dataset.task)) f.remove();
  for (const t of S.pending) if (!box.querySelector(`[data-task="${CSS.escape(t.task)}"]`)) box.append(askForm(t));
  updateAttention();
}

function askForm(t) {
  const uid = `a-${Math.random().toString(36).slice(2)}`;
  const status = h('p', { class: 'small', role: 'status' });
  const readers = [];
  const sets = (t.questions || []).map((q, qi) => {
    const name = `${uid}-${qi}`;
    const opts = (q.options || []).map((o, oi) => h('label', { class: 'check' },
      h('input', { type: q.multi_select ? 'checkbox' : 'radio', name, value: String(oi + 1) }), ' ', o));
    const free = h('input', { type: q.secret ? 'password' : 'text', id: `${name}-text`, autocomplete: q.secret ? 'off' : null });
    readers.push(() => {
      const picked = opts.map((l) => l.querySelector('input')).filter((i) => i.checked);
      const text = free.value.trim();
      if (!picked.length) return text;
      if (!text) return picked.map((i) => i.value).join(',');
      return `${picked.map((i) => q.options[Number(i.value) - 1]).join(', ')} — ${text}`;
    });
    return h('fieldset', {},
      h('legend', {}, q.question),
      q.detail ? h('p', { class: 'muted small' }, q.detail) : null,
      opts.length ? h('div', { class: 'options' }, opts) : null,
      h('div', { class: 'field' }, h('label', { for: `${name}-text` }, q.secret ? 'Secret (stored encrypted, never shown to the model)' : opts.length ? 'Or your own answer' : 'Your answer'), free));
  });
  const submit = h('button', { type: 'submit', class: 'primary', 'data-testid': 'ask-submit' }, 'Send answer');
  const form = h('form', { class: 'card ask', 'data-testid': 'ask-form', 'data-task': t.task, 'data-session': S.selected },
    h('header', {}, h('strong', {}, t.tool === 'store_secret' ? 'The agent needs a secret' : 'The agent asks'),
      h('span', { class: 'muted small' }, ` · session ${S.selected} · run ${t.run} · call ${t.tool_call_id}`)),
    sets, h('div', { class: 'actions' }, submit), status);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    submit.disabled = true;
    status.textContent = 'Sending…';
    const answers = readers.map((r) => r());
    try {
      if (agentWaitsOn(t)) {
        // The agent's turn goes on with the answer: its result goes back to the model.
        form.remove();
        updateAttention();
        S.agent.waiting = null;
        S.agent.running = true;
        setSending(true);
        agentStatus('Answered; the agent goes on…');
        const id = S.selected;
        api(`/v1/sessions/${encodeURIComponent(id)}/agent`, { answer: { task: t.task, answers } })
          .then((o) => { if (S.selected === id) agentFinished(o); })
          .catch((err) => { if (S.selected === id) agentFailed(err.message); loadPending(); });
        return;
      }
      await api(`/v1/sessions/${encodeURIComponent(S.selected)}/answers?provider=openai`, { task: t.task, answers });
      form.remove();
      updateAttention();
      loadPending();
    } catch (err) {
      status.textContent = `Could not send the answer: ${err.message}`;
      submit.disabled = false;
    }
  });
  return form;
}

// --- the agent prompt ---
// Turns run on the daemon (POST /v1/sessions/ID/agent); their rounds show in the timeline and
// their approvals above, like any round's. The model's side comes as Agent* events.
function agentMessage(kind, text, testid) {
  const el = h('div', { class: `msg ${kind}`, 'data-testid': testid }, text);
  $('agent-log').append(el);
  return el;
}

function agentStatus(text) {
  $('agent-status').textContent = text;
}

function setSending(busy) {
  $('agent-send').disabled = busy;
  $('agent-task').disabled = busy;
}

function onAgentEvent(ev) {
  const A = S.agent;
  switch (ev.type) {
    case 'AgentStarted':
      // A turn sent from this page is shown already; one sent elsewhere (the API) is shown here.
      if (ev.answered) agentStatus('Answered; the agent goes on.');
      else if (A.mine !== ev.task) agentMessage('user', ev.task);
      A.running = true;
      A.draft = null;
      setSending(true);
      agentStatus('The agent started.');
      break;
    case 'AgentModelCall':
      A.draft = null;
      agentStatus(`Model turn ${ev.turn} (${ev.model}): thinking…`);
      break;
    case 'AgentModelText':
      if (!A.draft) A.draft = agentMessage('assistant draft', '');
      A.draft.textContent += ev.text;
      break;
    case 'AgentModelRetry':
      agentStatus(`The model request failed (${ev.reason}); trying again in ${duration(ev.wait_ms)} (attempt ${ev.attempt}).`);
      break;
    case 'AgentModelDone':
      agentStatus(ev.tool_calls ? `The model called ${ev.tool_calls} tool${ev.tool_calls === 1 ? '' : 's'}; running ${ev.tool_calls === 1 ? 'it' : 'them'}…` : 'The model answered.');
      break;
    case 'AgentFinished': agentFinished(ev.outcome); break;
    case 'AgentFailed': agentFailed(ev.text); break;
    default: break;
  }
}

// Both the turn's response and its AgentFinished event land here; the first one shows it.
function agentFinished(o) {
  const A = S.agent;
  // The same outcome, from the response and the event; a resumed turn keeps its run.
  const key = JSON.stringify(o);
  if (!o || A.finished.has(key)) return;
  A.finished.add(key);
  if (A.draft) { A.draft.remove(); A.draft = null; }
  const end = o.end || {};
  const usage = `${o.rounds} round${o.rounds === 1 ? '' : 's'} · ${o.input_tokens} in / ${o.output_tokens} out tokens · ${o.model}`;
  switch (end.kind) {
    case 'answer':
      agentMessage('assistant', end.text, 'agent-answer');
      agentStatus(`Done: ${usage}.`);
      break;
    case 'waiting':
      A.waiting = end.task && end.task.task_hash;
      agentStatus(`The agent asks you something: answer it above and it goes on. (${usage})`);
      break;
    case 'max_rounds':
      agentStatus(`Stopped after ${end.rounds} rounds of tool calls without an answer; send "go on" to continue. (${usage})`);
      break;
    case 'stopped':
      if (end.text) agentMessage('assistant', end.text);
      agentStatus(`${end.reason}. (${usage})`);
      break;
    case 'fatal':
      agentStatus(`A tool stopped the run: ${end.reason}`);
      break;
    case 'handed_back':
      agentStatus("The model called a tool of this session's API client; that client runs it.");
      break;
    default: break;
  }
  A.running = false;
  A.mine = null;
  setSending(false);
}

function agentFailed(text) {
  const A = S.agent;
  if (!A.running) return;
  if (A.draft) { A.draft.remove(); A.draft = null; }
  agentStatus(`The turn failed: ${text}`);
  A.running = false;
  A.mine = null;
  setSending(false);
}

async function sendTask() {
  const id = S.selected;
  const task = $('agent-task').value.trim();
  if (!id || !task || S.agent.running) return;
  S.agent.mine = task;
  S.agent.running = true;
  agentMessage('user', task);
  $('agent-task').value = '';
  setSending(true);
  agentStatus('Sending…');
  const model = $('agent-model').value || undefined;
  try {
    const outcome = await api(`/v1/sessions/${encodeURIComponent(id)}/agent`, { task, model });
    if (S.selected === id) agentFinished(outcome);
  } catch (err) {
    if (S.selected === id) agentFailed(err.message);
  }
}

$('agent-form').addEventListener('submit', (e) => { e.preventDefault(); sendTask(); });
$('agent-task').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); sendTask(); }
});

// An agent turn waits on this task: the one this page saw stop, or (after a reload) a run the
// agent loop named (`turn-N`) in a daemon that runs agents.
function agentWaitsOn(t) {
  return S.agent.waiting === t.task || (S.agentModels.length > 0 && /^turn-\d+$/.test(t.run || ''));
}

function updateAttention() {
  $('attention').hidden = !$('confirmations').children.length && !$('asks').children.length;
}

// --- the global feed: session list, confirmations, connection state ---
function connectGlobal() {
  const conn = $('conn');
  const feed = events('/v1/events');
  feed.onopen = () => { conn.dataset.state = 'on'; conn.textContent = 'live'; loadSessions(); loadConfirmations(); };
  feed.onerror = () => { conn.dataset.state = 'off'; conn.textContent = 'reconnecting…'; };
  feed.onmessage = (m) => {
    let ev;
    try { ev = JSON.parse(m.data); } catch { return; }
    if (ev.type === 'ConfirmationRequested' || ev.type === 'ConfirmationResolved') loadConfirmations();
    if (ev.type === 'RoundStarted' || ev.type === 'Committed' || !S.sessions.some((s) => s.id === ev.session)) loadSessionsSoon();
  };
}

$('new-session').addEventListener('click', async () => {
  try {
    const s = await api('/v1/sessions', {});
    await loadSessions();
    select(s.id);
  } catch (e) {
    showError(`Cannot create a session (${e.message}).`);
  }
});

loggedIn.then(() => {
  api('/v1/version').then((v) => {
    $('version').textContent = `v${v.version}`;
    S.agentModels = v.agent_models || [];
    $('agent-model').replaceChildren(...S.agentModels.map((m) => h('option', { value: m }, m)));
    $('agent-box').hidden = !S.agentModels.length || !S.selected;
  }).catch(() => {});
  loadSessions();
  loadConfirmations();
  connectGlobal();
  // Sessions created without a round send no event: look again now and then.
  setInterval(() => { if (!document.hidden) loadSessions(); }, 5000);
});
