// The peer for bench/tokenizer.sh: js-tiktoken encoding a text file with GPT-2's vocabulary,
// timed like tokenizer_bench (first encode, then the median of the repeats), one RESULT line.
//   NODE_PATH=tests/tokenizer/node_modules node bench/js_tiktoken_peer.cjs TEXT_FILE [REPEATS]
const fs = require('fs');
const { getEncoding } = require('js-tiktoken');

const text = fs.readFileSync(process.argv[2], 'utf8');
const bytes = fs.statSync(process.argv[2]).size;
const repeats = Number(process.argv[3] || 20);
const encoding = getEncoding('gpt2');
let tokens = 0;
const mbPerS = () => {
  const start = process.hrtime.bigint();
  tokens = encoding.encode(text).length;
  return bytes / (Number(process.hrtime.bigint() - start) / 1e9) / 1e6;
};
const cold = mbPerS();
const warm = Array.from({ length: repeats }, mbPerS).sort((a, b) => a - b);
console.log('RESULT ' + JSON.stringify({ tokens, cold_mb_per_s: cold, mb_per_s: warm[Math.floor(repeats / 2)] }));
