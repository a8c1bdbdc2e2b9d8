// Prints the GPT-2 (r50k_base) token ids gpt-tokenizer gives each string of a JSON array:
//   node reference_encode.mjs INPUTS.json   ->   [[ids of input 0], [ids of input 1], ...]
// Special tokens are neither recognised nor refused, as in Tessera's encode().
import fs from 'node:fs';
import { encode } from 'gpt-tokenizer/encoding/r50k_base';

const inputs = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const options = { disallowedSpecial: new Set() };
process.stdout.write(JSON.stringify(inputs.map((text) => encode(text, options))) + '\n');
