// Browser test of the web console: a real daemon, Debian's chromium driven by playwright-core.
//
//   node e2e/console.spec.mjs <base_url> <artifacts_dir>
//
// The daemon must let the web tools reach 127.0.0.1 (TOOLDISPATCH_ALLOW_HOSTS=127.0.0.1): the
// concurrent round calls http_request against a slow local server so its calls really overlap.
// Exits 0 when every step passed, 1 with the failing step and why otherwise.
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { chromium } from 'playwright-core';

const [base, artifacts] = process.argv.slice(2);
if (!base || !artifacts) {
  console.error('usage: node e2e/console.spec.mjs <base_url> <artifacts_dir>');
  process.exit(2);
}
fs.mkdirSync(artifacts, { recursive: true });
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const WAIT = 20000;

let step = 'start';
const log = (msg) => console.log(`[console.spec] ${msg}`);
function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

// --- the daemon's API ---
async function call(method, url, body) {
  const res = await fetch(new URL(url, base), {
    method,
    headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* reported below */ }
  return { status: res.status, headers: res.headers, json, text };
}
async function ok(method, url, body) {
  const res = await call(method, url, body);
  check(res.status >= 200 && res.status < 300, `${method} ${url} answered ${res.status}: ${res.text}`);
  return res;
}
const fn = (id, name, args) => ({ id, type: 'function', function: { name, arguments: JSON.stringify(args) } });
const reply = (...calls) => ({ role: 'assistant', content: null, tool_calls: calls });
const runTool = (id, name, args) => fn(id, 'run_tool', { name, args });
const round = (session, run, msg) => ok('POST', `/v1/sessions/${session}/rounds?provider=openai&run=${run}&report=1`, msg);
const statusOf = (report) => Object.fromEntries(report.results.map((r) => [r.tool_call_id, r.status]));

// A local server that answers after 600 ms: three GETs to it overlap when they run in parallel.
const slow = http.createServer((req, res) => {
  setTimeout(() => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ path: req.url, slow: true }));
  }, 600);
});
await new Promise((resolve) => slow.listen(0, '127.0.0.1', resolve));
const slowUrl = `http://127.0.0.1:${slow.address().port}`;

// Calls that overlap in time go in different lanes: the console's rule, recomputed from the report.
function expectedLanes(report, ids) {
  const ran = report.results.filter((r) => ids.includes(r.tool_call_id) && r.started_ms !== null)
    .sort((a, b) => a.started_ms - b.started_ms);
  const ends = [];
  for (const r of ran) {
    const lane = ends.findIndex((e) => e <= r.started_ms);
    if (lane < 0) ends.push(r.ended_ms); else ends[lane] = r.ended_ms;
  }
  return ends.length;
}

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
const pageErrors = [];
const watch = (page) => {
  page.on('pageerror', (e) => pageErrors.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(`console error: ${m.text()}`); });
};
let page;
const shot = async (name, p = page) => {
  const file = path.join(artifacts, `console-${name}.png`);
  await p.screenshot({ path: file, fullPage: true });
  log(`screenshot ${file}`);
};

try {
  // (a) open the console, create a session, select it
  step = 'open the console';
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  watch(page);
  await page.goto(base);
  await page.waitForSelector('#conn[data-state=on]', { timeout: WAIT });

  step = 'create and select a session';
  const session = `e2e-${Date.now().toString(36)}`;
  const created = await ok('POST', '/v1/sessions', { id: session });
  check(created.status === 201 && created.json.id === session, `creating the session answered ${created.status}: ${created.text}`);
  await page.click(`[data-testid="session-${session}"]`, { timeout: WAIT });
  await page.waitForSelector(`[data-testid="session-${session}"][aria-current=true]`, { timeout: WAIT });
  const tools = await ok('GET', `/v1/sessions/${session}/tools?provider=openai`);
  const workdir = /Work directory: (.+)/.exec(tools.json.turn_context || '')?.[1]?.trim();
  check(workdir && fs.existsSync(workdir), `the turn context names no work directory this test can see: ${tools.json.turn_context}`);
  await shot('1-session');

  // (b) concurrent calls: three slow GETs and a calculation, after find_tools marked them
  step = 'mark the deferred tools';
  const marked = await round(session, 'r1', reply(fn('m1', 'find_tools', { query: 'select:http_request,calculate,edit_file' })));
  check(marked.json.results[0].status === 'ok', `find_tools answered ${JSON.stringify(marked.json.results)}`);

  step = 'concurrent round';
  const par = await round(session, 'r1', reply(
    runTool('get1', 'http_request', { url: `${slowUrl}/one` }),
    runTool('get2', 'http_request', { url: `${slowUrl}/two` }),
    runTool('get3', 'http_request', { url: `${slowUrl}/three` }),
    runTool('calc1', 'calculate', { expressions: ['2^10', 'sqrt(16)'] }),
  ));
  const parStatus = statusOf(par.json);
  for (const id of ['get1', 'get2', 'get3', 'calc1']) {
    check(parStatus[id] === 'ok', `call ${id} has status ${parStatus[id]}, not ok (is 127.0.0.1 in TOOLDISPATCH_ALLOW_HOSTS of the daemon?): ${JSON.stringify(par.json.results)}`);
  }
  const gets = ['get1', 'get2', 'get3'];
  const lanesWanted = expectedLanes(par.json, gets);
  check(lanesWanted > 1, `the three slow GETs did not overlap (${JSON.stringify(par.json.results.map((r) => [r.tool_call_id, r.started_ms, r.ended_ms]))}); the concurrency bound should be 3 or more`);
  for (const id of ['get1', 'get2', 'get3', 'calc1']) {
    await page.waitForSelector(`[data-testid="call-${id}"][data-status=ok]`, { timeout: WAIT });
    await page.waitForSelector(`[data-testid="row-${id}"][data-status=ok]`, { timeout: WAIT });
  }
  const lanesShown = await page.$$eval(gets.map((id) => `[data-testid="call-${id}"]`).join(','), (bars) => new Set(bars.map((b) => b.dataset.lane)).size);
  check(lanesShown === lanesWanted, `the timeline puts the GETs in ${lanesShown} lanes; their start/end times call for ${lanesWanted}`);
  log(`concurrent round: 4 calls ok, GETs in ${lanesShown} lanes`);
  await shot('2-concurrent');

  // Markers: a cached GET in a new run, the same calculation twice (deduped), hostile text.
  step = 'cached and deduped calls';
  const hostile = '<img src=x onerror="window.__xss=1">';
  const marks = await round(session, 'r2', reply(
    runTool('get4', 'http_request', { url: `${slowUrl}/one` }),
    runTool('calc2', 'calculate', { expressions: ['6*7'] }),
    runTool('calc3', 'calculate', { expressions: ['6*7'] }),
    runTool('calc4', 'calculate', { expressions: [hostile] }),
  ));
  const markStatus = statusOf(marks.json);
  const get4 = marks.json.results.find((r) => r.tool_call_id === 'get4');
  check(markStatus.calc3 === 'deduped', `the repeated calculation has status ${markStatus.calc3}, not deduped`);
  check(/^(\[http_request\] )?\(cached/.test(get4.content), `the repeated GET was not served from the cache: ${get4.content}`);
  await page.waitForSelector('[data-testid="call-get4"][data-cached=true]', { timeout: WAIT });
  await page.waitForSelector('[data-testid="row-calc3"][data-status=deduped]', { timeout: WAIT });
  await page.waitForSelector(`[data-testid="row-calc4"][data-status=${markStatus.calc4}]`, { timeout: WAIT });
  const injected = await page.evaluate(() => ({ xss: window.__xss, imgs: document.querySelectorAll('main img').length }));
  check(!injected.xss && injected.imgs === 0, `event text was rendered as HTML: ${JSON.stringify(injected)}`);

  // (c) a call that needs approval, approved in the page; then one declined
  step = 'confirmation: approve';
  const approvedName = `approved-${session}.txt`;
  const approvedPath = path.join(workdir, approvedName);
  const pendingRound = round(session, 'r3', reply(runTool('edit1', 'edit_file', { path: approvedName, mode: 'write', content: 'approved in the browser\n' })));
  pendingRound.catch(() => {});
  const card = await page.waitForSelector(`[data-testid="confirmation"][data-session="${session}"]`, { timeout: WAIT });
  const rule = await card.$eval('[data-testid="remember-rule"]', (el) => el.textContent);
  check(rule.includes('edit_file'), `the confirmation card shows remember rule ${JSON.stringify(rule)}, not an edit_file rule`);
  check(!fs.existsSync(approvedPath), 'the file exists before the call was approved');
  await shot('3-confirmation');
  await card.$eval('[data-testid="approve"]', (b) => b.click());
  const approved = await pendingRound;
  check(statusOf(approved.json).edit1 === 'ok', `the approved edit has status ${statusOf(approved.json).edit1}: ${approved.text}`);
  check(fs.readFileSync(approvedPath, 'utf8') === 'approved in the browser\n', `${approvedPath} does not hold what the approved call wrote`);
  await page.waitForSelector(`[data-testid="confirmation"][data-session="${session}"]`, { state: 'detached', timeout: WAIT });
  await page.waitForSelector('[data-testid="row-edit1"][data-status=ok]', { timeout: WAIT });

  step = 'confirmation: decline';
  const declinedRound = round(session, 'r3', reply(runTool('edit2', 'edit_file', { path: `declined-${session}.txt`, mode: 'write', content: 'never\n' })));
  declinedRound.catch(() => {});
  const card2 = await page.waitForSelector(`[data-testid="confirmation"][data-session="${session}"]`, { timeout: WAIT });
  await card2.$eval('input[type=text]', (i) => { i.value = 'not this file'; });
  await card2.$eval('[data-testid="decline"]', (b) => b.click());
  const declined = await declinedRound;
  const edit2 = declined.json.results.find((r) => r.tool_call_id === 'edit2');
  check(edit2.status === 'declined', `the declined edit has status ${edit2.status}`);
  check(edit2.content.includes('not this file'), `the decline reason is not in the result the model reads: ${edit2.content}`);
  check(!fs.existsSync(path.join(workdir, `declined-${session}.txt`)), 'the declined call wrote its file');
  await page.waitForSelector('[data-testid="row-edit2"][data-status=declined]', { timeout: WAIT });

  // (d) ask_user: the run parks, the page answers
  step = 'ask_user';
  const secretValue = 'tok-e2e-5f1c9a';
  const ask = await round(session, 'r4', reply(fn('ask1', 'ask_user', {
    questions: [
      { question: 'Which database?', detail: 'For the session store.', options: ['SQLite', 'Postgres'] },
      { question: 'Deploy token?', secret: true },
    ],
    state: { objective: 'set up storage', completed: [], next_steps: ['write the config'] },
  })));
  check(ask.headers.get('x-tooldispatch-pending'), `the ask_user round has no x-tooldispatch-pending header: ${ask.text}`);
  const form = await page.waitForSelector(`[data-testid="ask-form"][data-session="${session}"]`, { timeout: WAIT });
  check((await form.$$('input[type=password]')).length === 1, 'the secret question has no password input');
  await form.$eval('input[type=radio][value="2"]', (r) => r.click());
  await (await form.$('input[type=password]')).fill(secretValue);
  await shot('4-ask');
  await (await form.$('[data-testid="ask-submit"]')).click();
  await page.waitForSelector(`[data-testid="ask-form"][data-session="${session}"]`, { state: 'detached', timeout: WAIT });
  const left = await ok('GET', `/v1/sessions/${session}/pending`);
  check(left.json.tasks.length === 0, `the answered task is still pending: ${left.text}`);
  await page.waitForSelector('[data-testid="row-ask1"][data-status=ok]', { timeout: WAIT });
  const answerText = await page.$eval('[data-testid="row-ask1"][data-status=ok] .preview', (el) => el.textContent);
  check(answerText.includes('Postgres'), `the timeline does not show the answer: ${answerText}`);
  check(!(await page.content()).includes(secretValue), 'the secret answer appears in the page');

  // (e) the todo list
  step = 'todos';
  const todos = await round(session, 'r4', reply(fn('todo1', 'write_todo', { todos: [
    { content: 'Build the console', status: 'completed' },
    { content: 'Test it in a browser', status: 'in_progress', active_form: 'Testing it in a browser' },
    { content: 'Ship it', status: 'pending' },
  ] })));
  check(statusOf(todos.json).todo1 === 'ok', `write_todo answered ${todos.text}`);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="todos"] li').length === 3, null, { timeout: WAIT });
  const shown = await page.$$eval('[data-testid="todos"] li', (lis) => lis.map((li) => li.dataset.status));
  check(JSON.stringify(shown) === '["completed","in_progress","pending"]', `the todo list shows ${JSON.stringify(shown)}`);
  await shot('5-todos');

  // (f) the agent prompt: a task typed in the page, its one call approved by click, the answer shown
  step = 'agent prompt';
  const version = await ok('GET', '/v1/version');
  check((version.json.agent_models || []).includes('fake'), `the daemon offers no agent model (is the test's config with [models.fake] given to serve?): ${version.text}`);
  await page.waitForSelector('#agent-box:not([hidden])', { timeout: WAIT });
  const agentFile = path.join(workdir, 'agent-wrote.txt');
  await page.fill('[data-testid="agent-task"]', 'Write agent-wrote.txt');
  await page.click('[data-testid="agent-send"]');
  const agentCard = await page.waitForSelector(`[data-testid="confirmation"][data-session="${session}"]`, { timeout: WAIT });
  check(!fs.existsSync(agentFile), 'the agent wrote its file before the call was approved');
  await agentCard.$eval('[data-testid="approve"]', (b) => b.click());
  const agentAnswer = await page.waitForSelector('[data-testid="agent-answer"]', { timeout: WAIT });
  const answerShown = await agentAnswer.textContent();
  check(answerShown === 'Wrote agent-wrote.txt after your approval.', `the page shows the answer ${JSON.stringify(answerShown)}`);
  check(fs.existsSync(agentFile) && fs.readFileSync(agentFile, 'utf8') === 'written by the agent\n', `${agentFile} does not hold what the approved call wrote`);
  const asked = await page.$$eval('[data-testid="agent-log"] .msg.user', (els) => els.map((e) => e.textContent));
  check(JSON.stringify(asked) === '["Write agent-wrote.txt"]', `the task is shown as ${JSON.stringify(asked)}, not once`);
  await page.waitForFunction(() => !document.querySelector('[data-testid="agent-send"]').disabled, null, { timeout: WAIT });
  const statusShown = await page.$eval('[data-testid="agent-status"]', (el) => el.textContent);
  check(statusShown.startsWith('Done: 2 rounds'), `the status line says ${JSON.stringify(statusShown)}`);
  await shot('7-agent');

  // A narrow screen, replaying the whole session from the store.
  step = 'narrow screen';
  const phone = await browser.newPage({ viewport: { width: 390, height: 844 } });
  page = phone; // a failure's screenshot shows this page
  watch(phone);
  await phone.goto(base);
  await phone.click(`[data-testid="session-${session}"]`, { timeout: WAIT });
  await phone.waitForSelector('[data-testid="row-todo1"][data-status=ok]', { timeout: WAIT });
  await phone.waitForSelector('[data-testid="call-get1"][data-status=ok]', { timeout: WAIT });
  const width = await phone.evaluate(() => document.documentElement.scrollWidth);
  check(width <= 390, `the page is ${width}px wide on a 390px screen (it scrolls sideways)`);
  await shot('6-mobile');

  check(pageErrors.length === 0, `the page logged errors:\n${pageErrors.join('\n')}`);
  log('all steps passed');
} catch (e) {
  console.error(`[console.spec] FAILED at step "${step}": ${e.message}`);
  if (page) await shot('failure').catch(() => {});
  if (pageErrors.length) console.error(pageErrors.join('\n'));
  process.exitCode = 1;
} finally {
  await browser.close().catch(() => {});
  slow.close();
}
