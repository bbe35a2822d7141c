// tokgolden writes the tokenizer goldens for package tokenize from Hugging
// Face's Rust tokenizers (the official npm binding, pinned in
// package-lock.json): the same Rust code vLLM runs through transformers.
//
// Usage, from the repository root, after scripts/fetch-fixtures.sh and
// `go run ./tools/tokcorpus`:
//
//	(cd tools/tokgolden && npm ci && node tokgolden.js)
//
// Input:  tokenize/testdata/tok/corpus.jsonl.gz, .fixtures/models/<model>/tokenizer.json
// Output: tokenize/testdata/tok/<model>.golden.jsonl.gz, one JSON object per
// corpus line, in corpus order:
//
//	{"n": <token count>, "h": "<fnv-1a 64 of the ids>", "ids": [...]}
//
// with add_special_tokens=false. "ids" is present only when n <= MAX_IDS, so
// short texts show the exact difference and the files stay small. Every
// SPECIAL_EVERY-th line also carries "sn" and "sh", the count and hash with
// add_special_tokens=true (tokenizer.json's post-processor only; the Go side
// compares the same thing). The hash is FNV-1a 64 over the ids written as
// 4-byte little-endian integers, as lower-case hex without leading zeros.
'use strict';

const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { Tokenizer } = require('tokenizers');

const MODELS = ['qwen3', 'llama3_1', 'deepseek_v3', 'gptoss', 'gemma3', 'llama2'];
const MAX_IDS = 64;
const SPECIAL_EVERY = 7;

const root = path.resolve(__dirname, '..', '..');
const outDir = path.join(root, 'tokenize', 'testdata', 'tok');

const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const MASK = 0xffffffffffffffffn;

function fnv(ids) {
  let h = FNV_OFFSET;
  for (const id of ids) {
    for (let k = 0; k < 4; k++) {
      h ^= BigInt((id >>> (8 * k)) & 0xff);
      h = (h * FNV_PRIME) & MASK;
    }
  }
  return h.toString(16);
}

function readCorpus() {
  const raw = zlib.gunzipSync(fs.readFileSync(path.join(outDir, 'corpus.jsonl.gz'))).toString('utf8');
  return raw.split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l).text);
}

async function main() {
  const texts = readCorpus();
  const only = process.argv.slice(2);
  for (const model of MODELS) {
    if (only.length > 0 && !only.includes(model)) continue;
    const file = path.join(root, '.fixtures', 'models', model, 'tokenizer.json');
    const tok = Tokenizer.fromFile(file);
    const lines = [];
    let tokens = 0;
    const t0 = Date.now();
    for (let i = 0; i < texts.length; i++) {
      const enc = await tok.encode(texts[i], null, { addSpecialTokens: false });
      const ids = enc.getIds();
      tokens += ids.length;
      const o = { n: ids.length, h: fnv(ids) };
      if (ids.length <= MAX_IDS) o.ids = Array.from(ids);
      if (i % SPECIAL_EVERY === 0) {
        const s = (await tok.encode(texts[i], null, { addSpecialTokens: true })).getIds();
        o.sn = s.length;
        o.sh = fnv(s);
      }
      lines.push(JSON.stringify(o));
    }
    const gz = zlib.gzipSync(Buffer.from(lines.join('\n') + '\n'), { level: 9 });
    const out = path.join(outDir, `${model}.golden.jsonl.gz`);
    fs.writeFileSync(out, gz);
    console.log(`${model}: ${texts.length} texts, ${tokens} tokens, ${gz.length} bytes, ${Date.now() - t0} ms`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
