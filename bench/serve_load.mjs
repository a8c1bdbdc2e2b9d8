// Load on a running `tessera serve`: CLIENTS concurrent clients, each streaming completions one
// after another for DURATION seconds. Every stream is checked to the end: it must close with a
// finish_reason chunk, a usage chunk and `data: [DONE]`, and the usage must count exactly the
// tokens that arrived. Requests ask `logprobs: 0` because each chunk then lists its tokens, and
// one chunk can carry several when the client reads slower than the engine steps.
// Prints completed/failed/truncated/dropped requests (dropped: the connection was refused or
// reset), output tokens/s, requests/s, and p50/p99 time to first token and inter-token latency,
// then the server's own p99 time to first token read from its /metrics histogram the way
// Prometheus' histogram_quantile reads it, and the client's p99 over it. Latencies are the client's: tokens arrive when a read of
// the socket brings them, and chunks that one read brings together arrive together, so the
// inter-token latency is the gap between reads that bring new tokens.
// Exits 1 when any request failed, was truncated or dropped.
// --prompt gives every request the same text after a tag of its own (so the prefix cache cannot
// answer it), instead of Bible openings; --temperature 0 decodes greedily; --response-format
// sends its JSON as every request's response_format. --model may list several models, comma-
// separated (a model and its LoRA adapters): client i asks the i-th, round robin.
//   node serve_load.mjs --url http://127.0.0.1:8000 [--model NAME] [--api-key KEY]
//                       [--clients 64] [--duration 30] [--max-tokens 64] [--temperature 1]
//                       [--prompt TEXT] [--response-format JSON]
import { parseArgs } from 'node:util';

const { values: opts } = parseArgs({
  options: {
    url: { type: 'string' },
    model: { type: 'string' },
    'api-key': { type: 'string', default: '' },
    clients: { type: 'string', default: '64' },
    duration: { type: 'string', default: '30' },
    'max-tokens': { type: 'string', default: '64' },
    temperature: { type: 'string', default: '1' },
    prompt: { type: 'string' },
    'response-format': { type: 'string' },
  },
});
if (!opts.url) {
  console.error('usage: node serve_load.mjs --url http://HOST:PORT [--model NAME] [--api-key KEY]' +
                ' [--clients N] [--duration SECONDS] [--max-tokens N] [--temperature T]' +
                ' [--prompt TEXT] [--response-format JSON]');
  process.exit(2);
}
const clients = Number(opts.clients);
const durationMs = 1000 * Number(opts.duration);
const maxTokens = Number(opts['max-tokens']);
const temperature = Number(opts.temperature);
const responseFormat = opts['response-format'] ? JSON.parse(opts['response-format']) : undefined;
const headers = { 'Content-Type': 'application/json' };
if (opts['api-key']) headers.Authorization = `Bearer ${opts['api-key']}`;

const kOpenings = [
  'In the beginning', 'And God said', 'The LORD is my shepherd', 'Blessed are the meek',
  'And it came to pass', 'Now the serpent was', 'For God so loved', 'Vanity of vanities',
  'Let there be light', 'And the earth was', 'Remember now thy Creator', 'In my Father\'s house',
];

async function modelName() {
  if (opts.model) return opts.model;
  const r = await fetch(`${opts.url}/v1/models`, { headers });
  if (!r.ok) throw new Error(`GET /v1/models: HTTP ${r.status} ${await r.text()}`);
  return (await r.json()).data[0].id;
}

// A request that went wrong: kind is 'failed' or 'truncated'.
class LoadError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }
}

// One streamed completion, read to its end; adds its tokens and latencies to stats or throws.
async function streamOnce(model, prompt, seed, stats) {
  const start = performance.now();
  const response = await fetch(`${opts.url}/v1/completions`, {
    method: 'POST',
    headers,
    body: JSON.stringify({
      model, prompt, seed, max_tokens: maxTokens, temperature, logprobs: 0, stream: true,
      stream_options: { include_usage: true }, response_format: responseFormat,
    }),
  });
  if (!response.ok) throw new LoadError('failed', `HTTP ${response.status} ${await response.text()}`);

  let tokens = 0, finish = null, usage = null, done = false, last = null, buffer = '';
  const decoder = new TextDecoder();
  for await (const bytes of response.body) {
    const now = performance.now();
    let arrived = 0;
    buffer += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!event.startsWith('data: ')) continue;  // a keep-alive comment
      const data = event.slice('data: '.length);
      if (data === '[DONE]') {
        done = true;
        continue;
      }
      const chunk = JSON.parse(data);
      if (chunk.error) throw new LoadError('failed', `error event: ${chunk.error.message}`);
      for (const choice of chunk.choices) {
        arrived += choice.logprobs?.tokens?.length ?? 0;
        finish = choice.finish_reason ?? finish;
      }
      usage = chunk.usage ?? usage;
    }
    if (arrived > 0) {
      if (last === null) stats.ttft.push(now - start);
      else stats.itl.push(now - last);
      last = now;
      tokens += arrived;
      stats.arrivals += 1;
    }
  }
  if (!done) throw new LoadError('truncated', 'the stream ended without data: [DONE]');
  if (!finish) throw new LoadError('truncated', 'no finish_reason chunk');
  if (!usage) throw new LoadError('truncated', 'no usage chunk');
  if (usage.completion_tokens !== tokens) {
    throw new LoadError('truncated',
                        `usage says ${usage.completion_tokens} tokens but ${tokens} arrived`);
  }
  stats.tokens += tokens;
}

async function client(id, model, deadline, stats) {
  for (let i = 0; performance.now() < deadline; ++i) {
    const prompt = opts.prompt !== undefined ? `(${id}.${i}) ${opts.prompt}`
                                             : `${kOpenings[(id + i) % kOpenings.length]} (${id}.${i})`;
    try {
      await streamOnce(model, prompt, id * 1_000_000 + i, stats);
      stats.completed += 1;
    } catch (e) {
      const network = ['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'UND_ERR_SOCKET'];
      const kind = e instanceof LoadError ? e.kind
                   : network.includes(e.cause?.code) ? 'dropped' : 'failed';
      stats[kind] += 1;
      if (stats.errors.length < 5) stats.errors.push(`${kind}: ${e.message}`);
    }
    stats.lastEnd = performance.now();
  }
}

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(p / 100 * sorted.length))];
}

function latencyLine(label, samples) {
  const sorted = Float64Array.from(samples).sort();
  const ms = (x) => `${x.toFixed(1)} ms`.padStart(10);
  return `${label.padEnd(22)} p50 ${ms(percentile(sorted, 50))}   p99 ${ms(percentile(sorted, 99))}`;
}

// The q-quantile of a Prometheus histogram's cumulative buckets [[upper bound, count]...], by
// linear interpolation inside the bucket it falls in, as histogram_quantile does.
function histogramQuantile(q, buckets) {
  const total = buckets[buckets.length - 1][1];
  if (total === 0) return NaN;
  const rank = q * total;
  let lower = 0, below = 0;
  for (const [upper, count] of buckets) {
    if (count >= rank) {
      if (!Number.isFinite(upper)) return lower;
      return lower + (upper - lower) * (rank - below) / Math.max(1, count - below);
    }
    lower = upper;
    below = count;
  }
  return lower;
}

async function serverTtftP99() {
  const r = await fetch(`${opts.url}/metrics`, { headers });
  if (!r.ok) return NaN;
  const buckets = [];
  for (const line of (await r.text()).split('\n')) {
    const m = line.match(/^tessera_time_to_first_token_seconds_bucket\{.*le="([^"]+)"\} (\S+)/);
    if (m) buckets.push([m[1] === '+Inf' ? Infinity : Number(m[1]), Number(m[2])]);
  }
  return buckets.length ? 1000 * histogramQuantile(0.99, buckets) : NaN;
}

const models = (await modelName()).split(',');
const model = models.join(',');
const stats = {
  completed: 0, failed: 0, truncated: 0, dropped: 0, tokens: 0, arrivals: 0, ttft: [], itl: [], errors: [],
  lastEnd: 0,
};
console.log(`${clients} clients streaming completions of ${maxTokens} tokens for ` +
            `${durationMs / 1000} s against ${opts.url} (model ${model})`);
const start = performance.now();
await Promise.all(Array.from({ length: clients },
                             (_, id) => client(id, models[id % models.length],
                                               start + durationMs, stats)));
const seconds = (stats.lastEnd - start) / 1000;

console.log(`requests               completed ${stats.completed}   failed ${stats.failed}   ` +
            `truncated ${stats.truncated}   dropped ${stats.dropped}   ` +
            `(${(stats.completed / seconds).toFixed(1)} requests/s)`);
console.log(`output tokens          ${stats.tokens} in ${seconds.toFixed(1)} s = ` +
            `${(stats.tokens / seconds).toFixed(0)} tokens/s ` +
            `(${(stats.tokens / Math.max(1, stats.arrivals)).toFixed(2)} tokens per arrival)`);
console.log(latencyLine('time to first token', stats.ttft));
console.log(latencyLine('inter-token latency', stats.itl));
const serverP99 = await serverTtftP99();
const clientP99 = percentile(Float64Array.from(stats.ttft).sort(), 99);
console.log(`server p99 time to first token (its histogram) ${serverP99.toFixed(1)} ms; ` +
            `client p99 / server p99 = ${(clientP99 / serverP99).toFixed(2)}`);
for (const e of stats.errors) console.log(`  ${e}`);
if (stats.failed || stats.truncated || stats.dropped || !stats.completed) process.exit(1);
