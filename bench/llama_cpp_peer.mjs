// llama.cpp's side of bench/llama_cpp.sh: node-llama-cpp's prebuilt CPU build (installed in
// tests/llama_cpp by scripts/setup.sh --test) loads a GGUF file with its defaults and 2 threads,
// then times a PREFILL-token prompt evaluated in one batch and STEPS greedy batch-1 decode steps,
// REPEATS times; prints one 'RESULT {...}' line with the best of each.
//   node bench/llama_cpp_peer.mjs MODEL.gguf PREFILL STEPS REPEATS THREADS
import path from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const {getLlama} = await import(pathToFileURL(
    path.join(root, "tests/llama_cpp/node_modules/node-llama-cpp/dist/index.js")).href);

const [modelPath, prefill, steps, repeats, threads] = process.argv.slice(2).map(
    (v, i) => (i === 0 ? v : Number(v)));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const context = await model.createContext({
  contextSize: Math.max(prefill, steps + 8) + 8, batchSize: prefill, threads,
  // Dispatch each batch at once rather than on the next event-loop cycle.
  batching: {dispatchSchedule: (dispatch) => dispatch()}});
const prompt = Array.from({length: prefill}, (_, i) => (1000 * i + 13) % 256);

const sequence = context.getSequence();
let bestPrefill = 0, bestDecode = 0;
for (let r = 0; r <= repeats; ++r) {  // round 0 warms up
  await sequence.clearHistory();
  let t0 = performance.now();
  await sequence.evaluateWithoutGeneratingNewTokens(prompt);
  const prefillRate = prefill / ((performance.now() - t0) / 1000);
  await sequence.clearHistory();

  // Decode after a short prompt, as Tessera's decode bench does.
  const greedy = {generateNext: {token: true, options: {temperature: 0}}};
  const started = await sequence.controlledEvaluate(
      prompt.slice(0, 8).map((t, i) => (i === 7 ? [t, greedy] : t)));
  let next = started[7].next.token;
  t0 = performance.now();
  for (let i = 0; i < steps; ++i) {
    const [step] = await sequence.controlledEvaluate([[next, greedy]]);
    next = step.next.token;
  }
  const decodeRate = steps / ((performance.now() - t0) / 1000);
  if (r > 0) {
    bestPrefill = Math.max(bestPrefill, prefillRate);
    bestDecode = Math.max(bestDecode, decodeRate);
  }
}
console.log("RESULT " + JSON.stringify({
  model: path.basename(modelPath), prefill_tokens_per_s: bestPrefill, tokens_per_s: bestDecode}));
await context.dispose();
await model.dispose();
