// The lane charts of the web console in a real browser, against the daemon e2e/console.spec.mjs
// just drove: a round whose long and short calls overlap, watched live at 1400 px, then every
// session replayed from the store at 1400 px and at 390 px. In each chart no label may cover
// another label or another call's bar, every label shows its whole text, no duration reads
// "ms ms", and a finished round says it is done, not running.
//
// The round: one long GET per call the daemon runs at once (each longer than the one before)
// between short calculations. The last two calculations wait for the first GET to end and run
// beside the GETs still running, right after the end of its bar, where the old layout wrote
// their labels over that bar and over each other. Run by crates/tooldispatch/tests/suite/browser.rs.
//
//   node e2e/lanes.spec.mjs <base_url> <artifacts_dir> <playwright-core/index.mjs> <chromium> <max_concurrent>
//
// max_concurrent: how many calls of a round the daemon runs at once (TOOLDISPATCH_MAX_CONCURRENT_TOOLS).
import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [base, artifacts, playwright, chromiumPath, maxConcurrent] = process.argv.slice(2);
const { chromium } = await import(pathToFileURL(playwright).href);
const WAIT = 20000;

let step = 'start';
const log = (msg) => console.log(`[lanes] ${msg}`);
function check(cond, msg) {
  if (!cond) throw new Error(msg);
}
async function ok(method, url, body) {
  const res = await fetch(new URL(url, base), {
    method,
    headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  check(res.status >= 200 && res.status < 300, `${method} ${url} answered ${res.status}: ${text}`);
  return JSON.parse(text);
}
const fn = (id, name, args) => ({ id, type: 'function', function: { name, arguments: JSON.stringify(args) } });
const reply = (...calls) => ({ role: 'assistant', content: null, tool_calls: calls });
const runTool = (id, name, args) => fn(id, 'run_tool', { name, args });
const round = (session, run, msg) => ok('POST', `/v1/sessions/${session}/rounds?provider=openai&run=${run}&report=1`, msg);

// Long calls: GETs to a local server that answers /wait/N after N ms.
const slow = http.createServer((req, res) => {
  setTimeout(() => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ path: req.url }));
  }, Number(/^\/wait\/(\d+)/.exec(req.url)?.[1] || 0));
});
await new Promise((resolve) => slow.listen(0, '127.0.0.1', resolve));
const slowUrl = `http://127.0.0.1:${slow.address().port}`;

// In the page: every lane chart, with its head line and what overlaps in it. A label is an
// element of a lane that holds text itself; it belongs to the call of its data-testid
// (label-ID) or of the bar (call-ID) it is inside. Boxes are what is visible of an element
// (clipped by its ancestors' overflow), in CSS pixels.
function inspectCharts() {
  const visible = (el) => {
    const r = el.getBoundingClientRect();
    const box = { left: r.left, top: r.top, right: r.right, bottom: r.bottom };
    for (let a = el.parentElement; a; a = a.parentElement) {
      const cs = getComputedStyle(a);
      if (cs.overflowX === 'visible' && cs.overflowY === 'visible') continue;
      const q = a.getBoundingClientRect();
      box.left = Math.max(box.left, q.left);
      box.top = Math.max(box.top, q.top);
      box.right = Math.min(box.right, q.right);
      box.bottom = Math.min(box.bottom, q.bottom);
    }
    return box;
  };
  const overlap = (p, q) => {
    const w = Math.min(p.right, q.right) - Math.max(p.left, q.left);
    const h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
    return w > 0.5 && h > 0.5 ? `${w.toFixed(1)}x${h.toFixed(1)} px` : null;
  };
  const ownText = (el) => [...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
  const owner = (el) => ((el.dataset.testid || '').startsWith('label-')
    ? el.dataset.testid.slice('label-'.length)
    : (el.closest('[data-testid^="call-"]')?.dataset.testid || '').slice('call-'.length));
  return [...document.querySelectorAll('.chart')].map((chart) => {
    const round = chart.closest('[data-testid="round"]');
    const title = round?.querySelector('h4')?.textContent || '?';
    const bars = [...chart.querySelectorAll('[data-testid^="call-"]')]
      .map((b) => ({ id: b.dataset.testid.slice('call-'.length), box: visible(b) }));
    const labels = [...chart.querySelectorAll('.lane *')].filter(ownText).map((el) => ({
      id: owner(el), text: el.textContent, box: visible(el),
      cut: el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'visible',
    }));
    const problems = [];
    for (const b of bars) {
      const mine = labels.filter((l) => l.id === b.id);
      if (!mine.length) problems.push(`call ${b.id} has no label`);
      for (const l of mine) {
        if (l.box.right - l.box.left < 10) problems.push(`the label of ${b.id} (${JSON.stringify(l.text)}) is hidden`);
        if (l.cut) problems.push(`the label of ${b.id} (${JSON.stringify(l.text)}) is cut short`);
      }
    }
    labels.forEach((l, i) => {
      labels.forEach((m, j) => {
        const o = j > i && overlap(l.box, m.box);
        if (o) problems.push(`the label of ${l.id} (${JSON.stringify(l.text)}) overlaps the label of ${m.id} (${JSON.stringify(m.text)}) by ${o}`);
      });
      for (const b of bars) {
        const o = b.id !== l.id && overlap(l.box, b.box);
        if (o) problems.push(`the label of ${l.id} (${JSON.stringify(l.text)}) covers the bar of ${b.id} by ${o}`);
      }
    });
    return {
      title,
      head: [...(chart.querySelector('.chart-head')?.children || [])].map((x) => x.textContent).join(' | '),
      bars: bars.length,
      labels: labels.map((l) => l.text),
      problems,
    };
  });
}

// In the page: duration texts that repeat their unit ("6.9 ms ms"), in text or tooltips, each
// with the 30 characters before it.
function doubledUnits() {
  const texts = [...document.querySelectorAll('#rounds *')].flatMap((el) => [
    ...[...el.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE).map((n) => n.textContent),
    el.getAttribute('title') || '', el.getAttribute('aria-label') || '',
  ]);
  texts.push(document.querySelector('#rounds')?.innerText || '');
  return texts.map((t) => /.{0,30}\d ?(ms|s)\s+(ms|s)\b/.exec(t)?.[0]).filter(Boolean);
}

// Two frames: a layout the page schedules (a resize lays charts out again) has happened.
const settle = (p) => p.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));

// Everything the charts of the shown session must hold; `where` names the page in messages.
async function checkCharts(p, where, { finished }) {
  await settle(p);
  const doubled = await p.evaluate(doubledUnits);
  check(doubled.length === 0, `${where}: durations with a doubled unit: ${JSON.stringify(doubled)}`);
  const charts = await p.evaluate(inspectCharts);
  for (const c of charts) {
    check(c.problems.length === 0, `${where}: the chart of "${c.title}" (${c.bars} bars; labels ${JSON.stringify(c.labels)}):\n  ${c.problems.join('\n  ')}`);
    for (const text of c.labels) {
      check(/^\S+ \d+(\.\d)? (ms|s)$/.test(text), `${where}: the chart of "${c.title}" has the label ${JSON.stringify(text)}, not "<tool> <duration>"`);
    }
    if (finished.has(c.title)) {
      check(!/running/i.test(c.head), `${where}: the finished round "${c.title}" shows ${JSON.stringify(c.head)} above its chart`);
      check(/done/i.test(c.head) && /finished/i.test(c.head), `${where}: the finished round "${c.title}" shows ${JSON.stringify(c.head)} above its chart, not that it is done`);
    }
  }
  return charts;
}

// A round is committed (finished) once its title has its number: "Run r · round N".
const finishedTitles = (p) => p.$$eval('[data-testid="round"] h4', (hs) => hs.map((x) => x.textContent).filter((t) => /round \d+$/.test(t)));

const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
const pageErrors = [];
let page;
async function open(width, height) {
  const p = await browser.newPage({ viewport: { width, height } });
  p.on('pageerror', (e) => pageErrors.push(`page error: ${e.message}`));
  p.on('console', (m) => { if (m.type() === 'error') pageErrors.push(`console error: ${m.text()}`); });
  page = p;
  await p.goto(base);
  await p.waitForSelector('#conn[data-state=on]', { timeout: WAIT });
  return p;
}
const shot = async (name, p = page) => {
  const file = path.join(artifacts, `console-${name}.png`);
  await p.screenshot({ path: file, fullPage: true });
  log(`screenshot ${file}`);
};

try {
  step = 'a session, watched at 1400 px';
  const session = `lanes-${Date.now().toString(36)}`;
  await ok('POST', '/v1/sessions', { id: session });
  const wide = await open(1400, 900);
  await wide.click(`[data-testid="session-${session}"]`, { timeout: WAIT });
  await wide.waitForSelector(`[data-testid="session-${session}"][aria-current=true]`, { timeout: WAIT });
  const marked = await round(session, 'lanes', reply(fn('m1', 'find_tools', { query: 'select:http_request,calculate' })));
  check(marked.results[0].status === 'ok', `find_tools answered ${JSON.stringify(marked.results)}`);

  // One long GET per call the daemon runs at once, each longer than the one before, and short
  // calculations before and after them. The last two wait for a free worker: they run when the
  // first GET has ended, beside the others still running, right after the end of that GET's
  // bar (where the old chart wrote their labels over that bar and over each other).
  step = 'a round of long and short calls';
  const workers = Number(maxConcurrent);
  check(workers >= 1, `max_concurrent is ${maxConcurrent}`);
  const longs = Array.from({ length: workers }, (_, i) => `long${i + 1}`);
  const shorts = ['short0', 'short1', 'short2'];
  const report = await round(session, 'lanes', reply(
    runTool('short0', 'calculate', { expressions: ['3+3'] }),
    ...longs.map((id, i) => runTool(id, 'http_request', { url: `${slowUrl}/wait/${800 + 150 * i}` })),
    runTool('short1', 'calculate', { expressions: ['1+1'] }),
    runTool('short2', 'calculate', { expressions: ['2+2'] }),
  ));
  const ran = Object.fromEntries(report.results.map((r) => [r.tool_call_id, r]));
  for (const id of [...shorts, ...longs]) {
    check(ran[id]?.status === 'ok', `call ${id} has status ${ran[id]?.status}, not ok: ${JSON.stringify(report.results)}`);
  }
  const during = (a, b) => a.started_ms < b.ended_ms && b.started_ms < a.ended_ms;
  const timing = JSON.stringify(report.results.map((r) => [r.tool_call_id, r.started_ms, r.ended_ms]));
  // (Which GET ends first is up to the machine: under load a request can reach the server late.)
  const first = longs.map((id) => ran[id]).reduce((a, b) => (b.ended_ms < a.ended_ms ? b : a));
  for (const s of ['short1', 'short2']) {
    check(ran[s].started_ms >= first.ended_ms,
      `${s} did not wait for the first long call to end (does the daemon run more than ${workers} calls at once?): ${timing}`);
    check(longs.some((l) => during(ran[s], ran[l])), `${s} did not run while a long call did: ${timing}`);
    check(first.ended_ms - first.started_ms > 20 * (ran[s].ended_ms - ran[s].started_ms), `the long and short calls are not long and short: ${timing}`);
  }

  step = 'the round, watched live at 1400 px';
  for (const id of [...shorts, ...longs]) await wide.waitForSelector(`[data-testid="row-${id}"][data-status=ok]`, { timeout: WAIT });
  await wide.waitForFunction(() => [...document.querySelectorAll('[data-testid="round"] h4')].filter((h) => /round \d+$/.test(h.textContent)).length >= 2, null, { timeout: WAIT });
  const watched = await checkCharts(wide, 'watched live at 1400 px', { finished: new Set(await finishedTitles(wide)) });
  check(watched.length >= 2, `watched live: ${watched.length} lane charts, not one per round`);
  const lanesRound = watched.find((c) => c.labels.some((t) => t.startsWith('http_request')));
  check(lanesRound && lanesRound.bars === workers + 3, `the round's chart shows ${lanesRound?.bars} bars, not ${workers + 3}`);
  log(`watched live at 1400 px: ${lanesRound.title}: ${lanesRound.head}; labels ${JSON.stringify(lanesRound.labels)}`);
  await shot('8-lanes', wide);

  // Every session of the daemon (this one and the spec's), from the store, wide and narrow.
  const sessions = (await ok('GET', '/v1/sessions')).sessions;
  for (const [width, height] of [[1400, 900], [390, 844]]) {
    step = `history at ${width} px`;
    const p = await open(width, height);
    for (const s of sessions.filter((x) => x.rounds > 0)) {
      await p.click(`[data-testid="session-${s.id}"]`, { timeout: WAIT });
      await p.waitForSelector(`[data-testid="session-${s.id}"][aria-current=true]`, { timeout: WAIT });
      await p.waitForFunction((n) => [...document.querySelectorAll('[data-testid="round"] h4')].filter((h) => /round \d+$/.test(h.textContent)).length >= n, s.rounds, { timeout: WAIT });
      const finished = new Set(await finishedTitles(p));
      const charts = await checkCharts(p, `session ${s.id} from history at ${width} px`, { finished });
      if (s.id === session) check(charts.length === 2, `session ${s.id} from history at ${width} px: ${charts.length} lane charts, not 2`);
      check(charts.every((c) => finished.has(c.title)), `session ${s.id} from history at ${width} px: a replayed round has no number: ${JSON.stringify(charts.map((c) => c.title))}`);
      log(`session ${s.id} from history at ${width} px: ${charts.length} charts, each done and without overlaps`);
      if (s.id === session && width === 390) {
        const scroll = await p.evaluate(() => document.documentElement.scrollWidth);
        check(scroll <= width, `the page is ${scroll}px wide on a ${width}px screen`);
        await shot('9-lanes-mobile', p);
      }
    }
  }
  check(pageErrors.length === 0, `the page logged errors:\n${pageErrors.join('\n')}`);
  log('all steps passed');
} catch (e) {
  console.error(`[lanes] FAILED at step "${step}": ${e.message}`);
  if (page) await shot('lanes-failure').catch(() => {});
  if (pageErrors.length) console.error(pageErrors.join('\n'));
  process.exitCode = 1;
} finally {
  await browser.close().catch(() => {});
  slow.close();
}
