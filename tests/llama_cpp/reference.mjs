// Runs a GGUF file in llama.cpp (node-llama-cpp's prebuilt CPU build) as strictly as it allows:
// f32 KV cache, no flash attention, 2 threads. Reads {"tokens": [...], "greedy": N, "text": "..."}
// from the file named by the second argument and prints one JSON line: the log-probability of
// each next token of `tokens`, N greedy tokens after them, and llama.cpp's own tokens for `text`.
//   node reference.mjs MODEL.gguf INPUT.json
import {getLlama} from "node-llama-cpp";
import fs from "node:fs";

const [modelPath, inputPath] = process.argv.slice(2);
const input = JSON.parse(fs.readFileSync(inputPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const context = await model.createContext({
  contextSize: input.tokens.length + input.greedy + 8,
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

const textTokens = model.tokenize(input.text, false);
console.log(JSON.stringify({logprobs, greedy, text_tokens: Array.from(textTokens)}));
await context.dispose();
await model.dispose();
