// Prints the token ids gpt-tokenizer gives each string of a JSON array, in GPT-2's encoding
// (r50k_base, the default) or another it ships (cl100k_base: Llama 3's split pattern):
//   node reference_encode.mjs INPUTS.json [ENCODING]   ->   [[ids of input 0], ...]
// Special tokens are neither recognised nor refused, as in Tessera's encode().
import fs from 'node:fs';

const encoding = process.argv[3] ?? 'r50k_base';
const { encode } = await import(`gpt-tokenizer/encoding/${encoding}`);
const inputs = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const options = { disallowedSpecial: new Set() };
process.stdout.write(JSON.stringify(inputs.map((text) => encode(text, options))) + '\n');
