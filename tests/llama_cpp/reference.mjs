// Runs a GGUF file in llama.cpp (node-llama-cpp's prebuilt CPU build) as strictly as it allows:
// f32 KV cache, no flash attention, 2 threads. Reads {"tokens": [...], "greedy": N, "text": "...",
// "prompts": [[...], ...], "prompt_greedy": M} from the file named by the second argument and
// prints one JSON line: the log-probability of each next token of `tokens`, N greedy tokens after
// them, llama.cpp's own tokens for `text`, and M greedy tokens after each of `prompts` (optional).
//   node reference.mjs MODEL.gguf INPUT.json
import {getLlama} from "node-llama-cpp";
import fs from "node:fs";

const [modelPath, inputPath] = process.argv.slice(2);
const input = JSON.parse(fs.readFileSync(inputPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const context = await model.createContext({
  contextSize: Math.max(input.tokens.length, ...(input.prompts ?? []).map((p) => p.length)) +
      Math.max(input.greedy, input.prompt_greedy ?? 0) + 8,
  batchSize: input.tokens.length,
  threads: 2,
  flashAttention: false,
  experimentalKvCacheKeyType: "F32",
  experimentalKvCacheValueType: "F32",
});
const sequence = context.getSequence();

const scored = await sequence.controlledEvaluate(
    input.tokens.map((token) => [token, {generateNext: {probabilities: true}}]));
const logprobs = [];
for (let i = 0; i + 1 < input.tokens.length; ++i) {
  logprobs.push(Math.log(scored[i].next.probabilities.get(input.tokens[i + 1]) ?? 0));
}

// Greedy: the most probable token each step, fed back one at a time.
const greedy = [];
let next = scored[scored.length - 1].next.probabilities.entries().next().value[0];
for (let i = 0; i < input.greedy; ++i) {
  greedy.push(next);
  const [step] = await sequence.controlledEvaluate([[next, {generateNext: {probabilities: true}}]]);
  next = step.next.probabilities.entries().next().value[0];
}

// Each further prompt from an empty history, continued greedily as above.
const promptGreedy = [];
for (const prompt of input.prompts ?? []) {
  await sequence.clearHistory();
  const evaluated = await sequence.controlledEvaluate(prompt.map(
      (token, i) => [token, i + 1 === prompt.length ? {generateNext: {probabilities: true}} : {}]));
  let last = evaluated[evaluated.length - 1];
  const tokens = [];
  for (let i = 0; i < input.prompt_greedy; ++i) {
    const token = last.next.probabilities.entries().next().value[0];
    tokens.push(token);
    [last] = await sequence.controlledEvaluate([[token, {generateNext: {probabilities: true}}]]);
  }
  promptGreedy.push(tokens);
}

const textTokens = model.tokenize(input.text, false);
console.log(JSON.stringify({logprobs, greedy, text_tokens: Array.from(textTokens),
                            prompt_greedy: promptGreedy}));
await context.dispose();
await model.dispose();
