// Drives a running `tessera serve` with the official OpenAI client: completions and chat
// completions, whole and streamed, seeded sampling that gives the same text alone and under
// concurrent load, and tool calls, whole and streamed. Prints one line per check; exits 1 at the
// first failure.
//   node client_test.mjs BASE_URL API_KEY MODEL      (BASE_URL ends in /v1)
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { check } from './check.mjs';

const [baseURL, apiKey, model] = process.argv.slice(2);
if (!model) {
  console.error('usage: node client_test.mjs BASE_URL API_KEY MODEL');
  process.exit(2);
}
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const kTokens = 24;

// Text, finish reason and usage of one answer, however it arrived.
function checkAnswer({ text, finish, usage }, asked) {
  assert.equal(typeof text, 'string', 'text is not a string');
  assert.ok(text.length > 0, 'text is empty');
  assert.ok(finish === 'stop' || finish === 'length', `finish_reason is ${finish}`);
  assert.ok(usage, 'no usage');
  assert.ok(usage.prompt_tokens > 0, `usage.prompt_tokens is ${usage.prompt_tokens}`);
  if (finish === 'length') {
    assert.equal(usage.completion_tokens, asked, 'finish_reason length but completion_tokens');
  } else {
    assert.ok(usage.completion_tokens >= 1 && usage.completion_tokens <= asked,
              `completion_tokens ${usage.completion_tokens} for max ${asked}`);
  }
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens,
               'total_tokens is not prompt_tokens + completion_tokens');
  return `${JSON.stringify(text.slice(0, 20))}..., ${finish}, ` +
         `${usage.prompt_tokens}+${usage.completion_tokens}=${usage.total_tokens} tokens`;
}

async function complete(params) {
  const r = await client.completions.create(params);
  return { text: r.choices[0].text, finish: r.choices[0].finish_reason, usage: r.usage };
}

async function completeStreamed(params) {
  const stream = await client.completions.create(
      { ...params, stream: true, stream_options: { include_usage: true } });
  const out = { text: '', finish: null, usage: null };
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      out.text += c.text ?? '';
      out.finish = c.finish_reason ?? out.finish;
    }
    out.usage = chunk.usage ?? out.usage;
  }
  return out;
}

async function chat(params) {
  const r = await client.chat.completions.create(params);
  return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason, usage: r.usage };
}

async function chatStreamed(params) {
  const stream = await client.chat.completions.create(
      { ...params, stream: true, stream_options: { include_usage: true } });
  const out = { text: '', finish: null, usage: null };
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      out.text += c.delta?.content ?? '';
      out.finish = c.finish_reason ?? out.finish;
    }
    out.usage = chunk.usage ?? out.usage;
  }
  return out;
}

function assertSameAnswer(streamed, whole) {
  assert.equal(streamed.text, whole.text, 'streamed text differs from the whole response');
  assert.equal(streamed.finish, whole.finish, 'streamed finish_reason differs');
  assert.deepEqual(streamed.usage, whole.usage, 'streamed usage differs');
}

const completionParams = {
  model, prompt: 'In the beginning', max_tokens: kTokens, temperature: 1, seed: 7,
};
const chatParams = {
  model,
  messages: [
    { role: 'system', content: 'Answer in one verse.' },
    { role: 'user', content: 'Who made the light?' },
  ],
  max_completion_tokens: kTokens,
  temperature: 1,
  seed: 7,
};

let wholeCompletion;
await check('completion', async () => {
  wholeCompletion = await complete(completionParams);
  return checkAnswer(wholeCompletion, kTokens);
});
await check('streamed completion equals the whole one', async () => {
  const streamed = await completeStreamed(completionParams);
  const detail = checkAnswer(streamed, kTokens);
  assertSameAnswer(streamed, wholeCompletion);
  return detail;
});

let wholeChat;
await check('chat completion', async () => {
  wholeChat = await chat(chatParams);
  return checkAnswer(wholeChat, kTokens);
});
await check('streamed chat completion equals the whole one', async () => {
  const streamed = await chatStreamed(chatParams);
  const detail = checkAnswer(streamed, kTokens);
  assertSameAnswer(streamed, wholeChat);
  return detail;
});

const seededParams = {
  model, prompt: 'And God said, Let there be', max_tokens: kTokens, temperature: 1, seed: 1234,
};
let alone;
await check('seeded completion alone', async () => {
  alone = await complete(seededParams);
  return checkAnswer(alone, kTokens);
});
await check('seeded completion beside 8 concurrent requests gives the same text', async () => {
  const others = Array.from({ length: 8 }, (_, i) => {
    const params = {
      model, prompt: `Verse ${i}: and the earth was`, max_tokens: 16 + 4 * i, temperature: 1,
      seed: 100 + i,
    };
    return i % 2 ? completeStreamed(params) : complete(params);
  });
  const [loaded, ...answers] = await Promise.all([complete(seededParams), ...others]);
  answers.forEach((a, i) => checkAnswer(a, 16 + 4 * i));
  assert.equal(loaded.text, alone.text, 'the text changed when other requests ran beside it');
  return `${JSON.stringify(loaded.text.slice(0, 20))}... both times`;
});

// Tool calls: the reply must call get_weather (tool_choice names it), whole and streamed; the
// arguments the client receives parse and follow the function's parameters.
const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city over the next days',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', maxLength: 10 },
        days: { type: 'integer' },
        unit: { enum: ['celsius', 'fahrenheit'] },
      },
      required: ['city', 'days', 'unit'],
      additionalProperties: false,
    },
  },
};
const toolParams = {
  model,
  messages: [{ role: 'user', content: 'Weather in Oslo?' }],
  tools: [weatherTool],
  tool_choice: { type: 'function', function: { name: 'get_weather' } },
  max_completion_tokens: 200,
  temperature: 1,
  seed: 3,
};

function checkCall(call, finish) {
  assert.equal(finish, 'tool_calls', `finish_reason is ${finish}`);
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_/);
  assert.equal(call.function.name, 'get_weather');
  const args = JSON.parse(call.function.arguments);
  assert.deepEqual(Object.keys(args), ['city', 'days', 'unit']);
  assert.equal(typeof args.city, 'string');
  assert.ok([...args.city].length <= 10, `city ${args.city} is longer than 10`);
  assert.ok(Number.isInteger(args.days), `days ${args.days} is not an integer`);
  assert.ok(['celsius', 'fahrenheit'].includes(args.unit), `unit ${args.unit}`);
  return call.function.arguments;
}

let wholeCall;
await check('tool call', async () => {
  const r = await client.chat.completions.create(toolParams);
  const message = r.choices[0].message;
  assert.equal(message.content, null, 'a tool call has no content');
  assert.equal(message.tool_calls.length, 1);
  wholeCall = message.tool_calls[0];
  return checkCall(wholeCall, r.choices[0].finish_reason);
});
await check('streamed tool call carries the same arguments', async () => {
  const stream = await client.chat.completions.create({ ...toolParams, stream: true });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      for (const delta of c.delta?.tool_calls ?? []) {
        calls[delta.index] ??= { id: delta.id, type: delta.type, function: { name: '', arguments: '' } };
        calls[delta.index].function.name += delta.function?.name ?? '';
        calls[delta.index].function.arguments += delta.function?.arguments ?? '';
      }
      finish = c.finish_reason ?? finish;
    }
  }
  assert.equal(calls.length, 1);
  const detail = checkCall(calls[0], finish);
  assert.equal(calls[0].function.arguments, wholeCall.function.arguments);
  return detail;
});
