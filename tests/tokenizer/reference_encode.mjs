// Prints the token ids gpt-tokenizer gives each string of a JSON array, in GPT-2's encoding
// (r50k_base, the default) or another it ships (cl100k_base: Llama 3's split pattern):
//   node reference_encode.mjs INPUTS.json [ENCODING [allow-special]]   ->   [[ids of input 0], ...]
// Special tokens are neither recognised nor refused, as in Tessera's encode(). With
// allow-special they are recognised, as in its encode_allowing_special(), and js-tiktoken
// encodes: gpt-tokenizer 4.0.0 recognises a special token only at the start or end of the text.
// An ENCODING that names a tokenizer.json is encoded by @huggingface/tokenizers, which always
// recognises the file's added tokens, as encode_allowing_special() does.
import fs from 'node:fs';

const encoding = process.argv[3] ?? 'r50k_base';
const inputs = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
let encodeOne;
if (encoding.endsWith('tokenizer.json')) {
  const { Tokenizer } = await import('@huggingface/tokenizers');
  const tokenizer = new Tokenizer(JSON.parse(fs.readFileSync(encoding, 'utf8')), {});
  encodeOne = (text) => tokenizer.encode(text, { add_special_tokens: false }).ids;
} else if (process.argv[4] === 'allow-special') {
  const { getEncoding } = await import('js-tiktoken');
  const tiktoken = getEncoding(encoding);
  encodeOne = (text) => tiktoken.encode(text, 'all');
} else {
  const { encode } = await import(`gpt-tokenizer/encoding/${encoding}`);
  encodeOne = (text) => encode(text, { disallowedSpecial: new Set() });
}
process.stdout.write(JSON.stringify(inputs.map(encodeOne)) + '\n');
