// count.js adds HF tokenizers token counts to the chat goldens written by
// chatgolden.py: "tokens" = encode(text, add_special_tokens) with
// add_special_tokens from the request body (default false for chat, as
// vLLM). It uses the tokenizers npm package pinned by tools/tokgolden
// (run `npm ci` there first).
//
// Usage, from the repository root: node tools/chatgolden/count.js
'use strict';

const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, '..', 'tokgolden', 'node_modules', 'tokenizers'));

const root = path.join(__dirname, '..', '..');
const dir = path.join(root, 'tokenize', 'testdata', 'chat');

async function main() {
  for (const f of fs.readdirSync(dir)) {
    const m = f.match(/^(.*)\.golden\.jsonl$/);
    if (!m || m[1] === 'features') continue;
    const tok = Tokenizer.fromFile(path.join(root, '.fixtures', 'models', m[1], 'tokenizer.json'));
    const lines = fs.readFileSync(path.join(dir, f), 'utf8').split('\n').filter((l) => l);
    const out = [];
    for (const l of lines) {
      const r = JSON.parse(l);
      if (r.text !== undefined) {
        const body = JSON.parse(r.body);
        const enc = await tok.encode(r.text, null, { addSpecialTokens: body.add_special_tokens === true });
        r.tokens = enc.getIds().length;
      }
      out.push(JSON.stringify(r));
    }
    fs.writeFileSync(path.join(dir, f), out.join('\n') + '\n');
    console.log(`count.js: ${m[1]}: ${lines.length} cases`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
