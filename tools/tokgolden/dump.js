// dump.js MODEL LINE...: prints the Rust ids of corpus lines (debugging aid).
'use strict';
const fs = require('fs'), path = require('path'), zlib = require('zlib');
const { Tokenizer } = require('tokenizers');
const root = path.resolve(__dirname, '..', '..');
const lines = zlib.gunzipSync(fs.readFileSync(path.join(root, 'tokenize/testdata/tok/corpus.jsonl.gz'))).toString('utf8').split('\n');
const tok = Tokenizer.fromFile(path.join(root, '.fixtures/models', process.argv[2], 'tokenizer.json'));
(async () => {
  for (const i of process.argv.slice(3)) {
    const enc = await tok.encode(JSON.parse(lines[+i]).text, null, { addSpecialTokens: false });
    console.log(JSON.stringify({ line: +i, ids: enc.getIds() }));
  }
})();
