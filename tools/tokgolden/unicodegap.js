// unicodegap.js classifies code points that Go's unicode tables leave
// unassigned, for tools/unicodegap. Input on stdin: one hex code point a
// line. Output: "hex category" for each code point the Rust reference
// (HF tokenizers, whose Oniguruma carries newer Unicode data) treats as
// assigned; the category comes from Node's ICU. Every classification is
// checked against the reference's own pre-tokenizers:
//   Llama 3 (cl100k pattern):   "a"+c is one piece iff c is \p{L};
//                               "1"+c is one piece iff c is \p{N};
//   DeepSeek V3 (last stage):   " "+c is one piece iff c is \p{P}\p{S}\p{L}\p{M}.
// A code point ICU knows but the reference does not (Unicode newer than the
// reference) is left out; one where they disagree otherwise aborts.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const root = path.resolve(__dirname, '..', '..');
const pre = (m) => Tokenizer.fromFile(path.join(root, '.fixtures', 'models', m, 'tokenizer.json')).getPreTokenizer();
const llama = pre('llama3_1');
const ds = pre('deepseek_v3');

const cats = ['Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'Mn', 'Mc', 'Me', 'Nd', 'Nl', 'No', 'Pc', 'Pd', 'Ps', 'Pe', 'Pi', 'Pf', 'Po', 'Sm', 'Sc', 'Sk', 'So', 'Zs', 'Zl', 'Zp', 'Cc', 'Cf', 'Co'];
const res = cats.map((c) => [c, new RegExp('^\\p{gc=' + c + '}$', 'u')]);
const category = (ch) => {
  for (const [c, r] of res) if (r.test(ch)) return c;
  return 'Cn';
};

const out = [];
let newer = 0;
for (const h of fs.readFileSync(0, 'utf8').split('\n')) {
  if (!h) continue;
  const ch = String.fromCodePoint(parseInt(h, 16));
  const cat = category(ch);
  if (cat === 'Cn') continue;
  const isL = llama.preTokenizeString('a' + ch).length === 1;
  const isN = llama.preTokenizeString('1' + ch).length === 1;
  const isPSLM = ds.preTokenizeString(' ' + ch).length === 1;
  if (!isL && !isN && !isPSLM) {
    newer++; // unassigned for the reference too
    continue;
  }
  if (isL !== (cat[0] === 'L') || isN !== (cat[0] === 'N') || isPSLM !== 'PSLM'.includes(cat[0])) {
    console.error(`unicodegap: U+${h} is ${cat} in ICU but L=${isL} N=${isN} PSLM=${isPSLM} in the reference`);
    process.exit(1);
  }
  out.push(h + ' ' + cat);
}
// NFC: the reference's normalizer (the unicode-normalization-alignments
// crate) carries older data than ICU and Go. Find the combining marks it
// treats as starters (canonical combining class 0): those where reordering
// or composition around them differs from ICU. Decomposition and
// composition of everything else agree (checked with further probes when
// this tool was written).
const assigned = out.length;
const norm = Tokenizer.fromFile(path.join(root, '.fixtures', 'models', 'qwen3', 'tokenizer.json')).getNormalizer();
let starters = 0;
for (let cp = 0; cp < 0x110000; cp++) {
  if (cp >= 0xd800 && cp <= 0xdfff) continue;
  const c = String.fromCodePoint(cp);
  for (const probe of ['a' + c + '\u0334', c + '\u0301', 'a' + c + '\u0301']) {
    if (norm.normalizeString(probe) !== probe.normalize('NFC')) {
      out.push(cp.toString(16) + ' nfc0');
      starters++;
      break;
    }
  }
}
process.stdout.write(out.join('\n') + '\n');
console.error(`unicodegap: ${starters} combining marks the reference NFC treats as starters`);
console.error(`unicodegap: ${assigned} code points assigned for the reference, ${newer} newer than it (ICU ${process.versions.unicode})`);
