// Opens a training run's live page in headless Chromium and checks it against the run itself:
// every chart has data once the run has some, and the page's latest loss, tokens/s, MFU, memory
// per rank and step breakdown are the values the run's /metrics reports for the same step.
// Saves a full-page screenshot. Prints one line per check; exits 1 at the first failure.
//   node check_live_page.mjs URL SCREENSHOT_PATH    (URL serves the page, history.json, metrics)
// Needs Debian's chromium at /usr/bin/chromium; playwright-core downloads no browser.
import { chromium } from 'playwright-core';

const [url, screenshotPath] = process.argv.slice(2);
if (!screenshotPath) {
  console.error('usage: node check_live_page.mjs URL SCREENSHOT_PATH');
  process.exit(2);
}
const base = url.endsWith('/') ? url : url + '/';
const kOverallMs = 150_000;
const kLiveMs = 60_000;
const kTolerance = 1e-9;
const kParts = ['data_wait', 'forward', 'backward', 'optimizer', 'communication', 'checkpoint',
                'other'];
const kKinds = ['parameters', 'gradients', 'optimizer', 'activations'];

class CheckFailure extends Error {}
const fail = (message) => { throw new CheckFailure(message); };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const last = (points) => points[points.length - 1];

function near(a, b) {
  return a === b || Math.abs(a - b) <= kTolerance * Math.max(Math.abs(a), Math.abs(b));
}

function expectNear(what, page, metric) {
  if (typeof page !== 'number' || !near(page, metric)) {
    fail(`${what}: page ${page}, /metrics ${metric}`);
  }
}

// ---- Prometheus text exposition format 0.0.4 ------------------------------------------------

const kComment = /^#[ \t]+(HELP|TYPE)[ \t]+[a-zA-Z_:][a-zA-Z0-9_:]*(?:[ \t]+(.*))?$/;
// The label set ends at the last '}': neither the value nor the timestamp can hold one.
const kSample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:[ \t]*\{(.*)\})?[ \t]+(\S+)(?:[ \t]+(-?\d+))?$/;
const kLabel = /[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)/y;
const kTypes = ['counter', 'gauge', 'histogram', 'summary', 'untyped'];

// HELP text escapes backslash and newline; label values also the double quote.
function unescape(text, quotes, where) {
  return text.replace(/\\(.?)/g, (all, c) => (c === 'n' ? '\n' : c === '\\' ? c
      : quotes && c === '"' ? c : fail(`${where}: bad escape '${all}'`)));
}

function parseValue(token, where) {
  if (token === 'NaN') return NaN;
  if (token === '+Inf' || token === 'Inf') return Infinity;
  if (token === '-Inf') return -Infinity;
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(token)) fail(`${where}: bad value ${token}`);
  return Number(token);
}

// Samples as {name, labels, value}; comments other than HELP and TYPE are skipped.
function parsePrometheus(text) {
  const samples = [];
  text.split('\n').forEach((raw, index) => {
    const where = `/metrics line ${index + 1}`;
    const line = raw.trim();
    if (line === '') return;
    if (line.startsWith('#')) {
      const m = kComment.exec(line);
      if (m?.[1] === 'TYPE' && !kTypes.includes(m[2])) fail(`${where}: unknown type ${m[2]}`);
      if (m?.[1] === 'HELP') unescape(m[2] ?? '', false, where);
      return;
    }
    const m = kSample.exec(line) ?? fail(`${where}: not a sample: ${line}`);
    const labels = {};
    const body = m[2] ?? '';
    kLabel.lastIndex = 0;
    while (body.slice(kLabel.lastIndex).trim() !== '') {
      const at = kLabel.lastIndex;
      const l = kLabel.exec(body) ?? fail(`${where}: bad labels at '${body.slice(at)}'`);
      if (l[1] in labels) fail(`${where}: label ${l[1]} given twice`);
      labels[l[1]] = unescape(l[2], true, where);
    }
    samples.push({ name: m[1], labels, value: parseValue(m[3], where) });
  });
  return samples;
}

// The one sample of `name` whose labels are exactly `labels`.
function sampleValue(samples, name, labels = {}) {
  const want = JSON.stringify(Object.entries(labels).sort());
  const found = samples.filter(
      (s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === want);
  if (found.length !== 1) fail(`/metrics has ${found.length} samples ${name}${want}`);
  return found[0].value;
}

// ---- Page -----------------------------------------------------------------------------------

async function fetchText(path) {
  const res = await fetch(base + path, { signal: AbortSignal.timeout(10_000) });
  if (!res.ok) fail(`GET ${base + path}: HTTP ${res.status}`);
  return res.text();
}

const pageState = (page) => page.evaluate(() => ({
  updates: window.tesseraUpdates ?? 0,
  charts: window.tesseraCharts ?? null,
}));

const latestStep = (charts) => {
  const loss = charts?.loss?.series?.loss ?? [];
  return loss.length ? last(loss)[0] : null;
};

async function nextUpdate(page) {
  const seen = await page.evaluate(() => window.tesseraUpdates ?? 0);
  await page.waitForFunction((n) => window.tesseraUpdates > n, seen,
                             { timeout: 15_000, polling: 10 });
  return pageState(page);
}

// Live: redrawn from fetched data at least twice, and seen to move on by at least a step.
async function waitLive(page) {
  const deadline = Date.now() + kLiveMs;
  let first = null;
  let state = null;
  while (Date.now() < deadline) {
    state = await pageState(page);
    const step = latestStep(state.charts);
    if (step !== null && first === null) first = step;
    if (first !== null && step > first && state.updates >= 2) return `step ${first} -> ${step}`;
    await sleep(200);
  }
  return fail(`page not live after ${kLiveMs / 1000} s: ${state?.updates} updates, ` +
              `first step ${first}, latest ${latestStep(state?.charts)}`);
}

// The page's charts and /metrics at one step: the page's latest step when the two agree.
// Training may move on between the two reads; when it keeps doing so, the check uses the
// point the page drew at /metrics' step, which the page's next fetch brings.
async function readAgreeing(page) {
  for (let attempt = 1; attempt <= 8; ++attempt) {
    const { charts } = await nextUpdate(page);
    const metrics = parsePrometheus(await fetchText('metrics'));
    const step = sampleValue(metrics, 'tessera_train_step');
    if (latestStep(charts) === step) return { charts, metrics, step, how: "the page's latest" };
  }
  // The server thins a long history, so the step may be gone by the page's next fetch.
  for (let attempt = 1; attempt <= 3; ++attempt) {
    const metrics = parsePrometheus(await fetchText('metrics'));
    const step = sampleValue(metrics, 'tessera_train_step');
    const { charts } = await nextUpdate(page);
    if (charts?.loss?.series?.loss?.some((p) => p[0] === step)) {
      return { charts, metrics, step, how: `page moved on to ${latestStep(charts)}` };
    }
  }
  return fail('the page never drew the step /metrics reported');
}

function pointAt(points, step, what) {
  const p = points.find((q) => q[0] === step);
  return p ? p[1] : fail(`${what}: the page has no point at step ${step}`);
}

async function checks(page, errors) {
  const check = async (name, body) => {
    try {
      console.log(`ok   ${name}: ${await body()}`);
    } catch (e) {
      if (e instanceof CheckFailure) e.message = `${name}: ${e.message}`;
      throw e;
    }
  };
  await check('page live', () => waitLive(page));

  let agreed;
  await check('page and /metrics at one step', async () => {
    agreed = await readAgreeing(page);
    return `step ${agreed.step} (${agreed.how})`;
  });
  const { charts, metrics, step } = agreed;
  const records = JSON.parse(await fetchText('history.json')).records;
  const run = records.find((r) => r && r.run)?.run ?? fail('history.json has no run record');
  const s = ['loss', 'tokens', 'mfu', 'memory', 'breakdown'].every((id) => charts?.[id]?.series)
      ? Object.fromEntries(Object.entries(charts).map(([id, c]) => [id, c.series]))
      : fail(`window.tesseraCharts has charts [${Object.keys(charts ?? {})}]`);
  const hasVal = records.some((r) => typeof r?.val_loss === 'number');
  const hasHfu = records.some((r) => typeof r?.hfu === 'number');

  await check('charts have data', () => {
    const want = [['loss', 'loss'], ['tokens', 'tokens_per_s'], ['mfu', 'mfu_pct'],
                  ...kParts.map((p) => ['breakdown', p])];
    if (hasVal) want.push(['loss', 'val_loss']);
    if (hasHfu) want.push(['mfu', 'hfu_pct']);
    for (const [id, name] of want) {
      const points = s[id][name] ?? [];
      if (points.length === 0) fail(`chart ${id}: series ${name} is empty`);
      // A rollback's replayed steps replace the ones drawn before, so steps only increase.
      const back = points.findIndex((p, i) => i > 0 && !(p[0] > points[i - 1][0]));
      if (back > 0) fail(`chart ${id}: series ${name} goes back to step ${points[back][0]}`);
    }
    for (const kind of kKinds) {
      const ranks = (s.memory[kind] ?? []).map((p) => p[0]).join(',');
      const expected = [...Array(run.ranks).keys()].join(',');
      if (ranks !== expected) fail(`memory ${kind}: bars of ranks [${ranks}], not [${expected}]`);
    }
    return `${s.loss.loss.length} steps, ${s.loss.val_loss.length} held-out, ${run.ranks} ranks`;
  });

  await check('loss, tokens/s, MFU match /metrics', () => {
    expectNear('loss', pointAt(s.loss.loss, step, 'loss'),
               sampleValue(metrics, 'tessera_train_loss'));
    expectNear('tokens/s', pointAt(s.tokens.tokens_per_s, step, 'tokens/s'),
               sampleValue(metrics, 'tessera_train_tokens_per_second'));
    expectNear('MFU', pointAt(s.mfu.mfu_pct, step, 'MFU') / 100,
               sampleValue(metrics, 'tessera_train_mfu_ratio'));
    return `at step ${step}`;
  });

  await check('memory matches /metrics', () => {
    const ranks = new Set(metrics.filter((m) => m.name === 'tessera_train_memory_bytes')
                              .map((m) => m.labels.rank));
    if (ranks.size !== run.ranks) fail(`/metrics has memory for ${ranks.size} ranks`);
    for (const rank of ranks) {
      for (const kind of kKinds) {
        expectNear(`memory rank ${rank} ${kind}`, pointAt(s.memory[kind], Number(rank), kind),
                   sampleValue(metrics, 'tessera_train_memory_bytes', { rank, kind }));
      }
    }
    return `${ranks.size} ranks x ${kKinds.length} kinds`;
  });

  await check('step breakdown matches /metrics', () => {
    for (const part of kParts) {
      expectNear(`breakdown ${part}`, pointAt(s.breakdown[part], step, part),
                 sampleValue(metrics, 'tessera_train_step_breakdown_seconds', { part }));
    }
    return `${kParts.length} parts at step ${step}`;
  });

  if (hasVal) {
    // A held-out record can land after the page's last fetch; its next fetch has it.
    await check('held-out loss matches /metrics', async () => {
      const want = sampleValue(parsePrometheus(await fetchText('metrics')),
                               'tessera_train_held_out_loss');
      for (let tries = 0; tries < 3; ++tries) {
        const points = (await nextUpdate(page)).charts.loss.series.val_loss;
        const p = [...points].reverse().find((q) => near(q[1], want));
        if (p) return `${want} at step ${p[0]}`;
      }
      return fail(`the page has no held-out point of ${want}`);
    });
  }

  await check('no page errors', () => (errors.length ? fail(errors.join('; ')) : 'none'));
}

async function main() {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout: 30_000,
  });
  let timer;
  try {
    const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    const overall = new Promise((resolve, reject) => {
      timer = setTimeout(() => reject(new CheckFailure(`no result in ${kOverallMs / 1000} s`)),
                         kOverallMs);
    });
    let failure = null;
    try {
      await page.goto(base, { timeout: 30_000 });
      await Promise.race([checks(page, errors), overall]);
    } catch (e) {
      failure = e;
    }
    // Also after a failure: the picture often shows why.
    try {
      await page.screenshot({ path: screenshotPath, fullPage: true, timeout: 15_000 });
      console.log(`ok   screenshot: ${screenshotPath}`);
    } catch (e) {
      failure ??= e;
    }
    if (failure) throw failure;
  } finally {
    clearTimeout(timer);
    await browser.close();
  }
}

// The last resort should closing the browser itself hang.
setTimeout(() => {
  console.log('FAIL the check did not finish');
  process.exit(1);
}, kOverallMs + 60_000).unref();

try {
  await main();
} catch (e) {
  // A stack only for what looks like a mistake in this script rather than in the page or run.
  const bug = e instanceof TypeError || e instanceof ReferenceError || e instanceof SyntaxError;
  console.log(`FAIL ${bug ? e.stack : e.message}`);
  process.exit(1);
}
