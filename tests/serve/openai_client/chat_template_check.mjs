// Checks that `tessera serve` on a Hugging Face model folder renders chats with the folder's own
// chat template: for each conversation, the reference prompt is the template rendered by
// @huggingface/jinja and tokenized by @huggingface/tokenizers (what Transformers.js's
// apply_chat_template does), and the server's /tokenize must give exactly those ids, and its
// chat completion (whole and streamed, through the official OpenAI client) must count exactly
// that many prompt tokens. Prints one line per check; exits 1 at the first failure.
// With TEMPLATE_FILE, that template is the reference (the server's --chat-template).
//   node chat_template_check.mjs BASE_URL API_KEY MODEL HF_DIR [TEMPLATE_FILE]   (BASE_URL ends in /v1)
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import { check } from './check.mjs';

const [baseURL, apiKey, model, folder, templateFile] = process.argv.slice(2);
if (!folder) {
  console.error('usage: node chat_template_check.mjs BASE_URL API_KEY MODEL HF_DIR');
  process.exit(2);
}
const read = (name) => JSON.parse(readFileSync(path.join(folder, name), 'utf8'));
const tokenizerConfig = read('tokenizer_config.json');
const tokenizer = new Tokenizer(read('tokenizer.json'), tokenizerConfig);
const templateText = templateFile ? readFileSync(templateFile, 'utf8') : tokenizerConfig.chat_template;
const template = new Template(templateText);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });

function referenceIds(messages, addGenerationPrompt) {
  const text = template.render({
    messages, add_generation_prompt: addGenerationPrompt, bos_token: tokenizerConfig.bos_token,
    eos_token: tokenizerConfig.eos_token, tools: null, documents: null,
  });
  return tokenizer.encode(text, { add_special_tokens: false }).ids;
}

async function serverIds(body) {
  const response = await fetch(baseURL.replace(/\/v1$/, '') + '/tokenize', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ model, ...body }),
  });
  assert.equal(response.status, 200, `/tokenize answered ${response.status}`);
  const reply = await response.json();
  assert.equal(reply.count, reply.tokens.length, '/tokenize count is not its tokens length');
  return reply.tokens;
}

// Mixtral's template takes only alternating user and assistant turns; the others a system one.
const alternating = [
  { role: 'user', content: 'Hello there, who are you?' },
  { role: 'assistant', content: 'A small model.' },
  { role: 'user', content: 'Then tell me: the cat sat on the mat. Ünïcödé too!' },
];
const conversations = templateText.includes("raise_exception('Only user and assistant")
  ? [alternating, alternating.slice(0, 1)]
  : [[{ role: 'system', content: 'You answer briefly.' }, ...alternating], alternating.slice(0, 1)];

for (const [i, messages] of conversations.entries()) {
  const expected = referenceIds(messages, true);
  await check(`conversation ${i}: /tokenize equals the reference rendering`, async () => {
    assert.deepEqual(await serverIds({ messages }), expected);
    assert.deepEqual(await serverIds({ messages, add_generation_prompt: false }),
                     referenceIds(messages, false));
    return `${expected.length} tokens`;
  });
  await check(`conversation ${i}: chat completion counts the same prompt`, async () => {
    const whole = await client.chat.completions.create({ model, messages, max_tokens: 8 });
    assert.equal(whole.usage.prompt_tokens, expected.length, 'usage.prompt_tokens');
    assert.equal(typeof whole.choices[0].message.content, 'string');
    const stream = await client.chat.completions.create({
      model, messages, max_tokens: 8, stream: true, stream_options: { include_usage: true },
    });
    let usage = null;
    for await (const chunk of stream) usage = chunk.usage ?? usage;
    assert.ok(usage, 'the stream carried no usage');
    assert.equal(usage.prompt_tokens, expected.length, 'streamed usage.prompt_tokens');
    return `${whole.usage.completion_tokens} tokens back, finish ${whole.choices[0].finish_reason}`;
  });
}
