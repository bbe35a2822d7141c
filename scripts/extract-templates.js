// Extracts the chat-template corpus from an unpacked
// @huggingface/ollama-utils package (scripts/fetch-fixtures.sh runs it).
//
// Usage: node scripts/extract-templates.js <package dir> <output dir>
//
// The package's dist/index.js holds OLLAMA_CHAT_TEMPLATE_MAPPING, entries of
// {model, gguf, ollama}: gguf is the model's Hugging Face chat template.
// The constant is not exported, so the file is compiled as a CommonJS
// module with one line appended that exports it; its one dependency
// (@huggingface/jinja, used only by functions) is stubbed, nothing else
// runs. One file per distinct template, named from the first model that
// carries it (library/qwen2.5:7b -> qwen2.5_7b.jinja), in the package's
// order; index.json lists {file, model, sha256} for each.
"use strict";
const Module = require("module");
const fs = require("fs");
const path = require("path");
const crypto = require("crypto");

const [pkg, out] = process.argv.slice(2);
if (!pkg || !out) {
  console.error("usage: node extract-templates.js <package dir> <output dir>");
  process.exit(2);
}

const file = path.join(pkg, "dist", "index.js");
const load = Module._load;
Module._load = function (request, ...rest) {
  if (request === "@huggingface/jinja") return {};
  return load.call(this, request, ...rest);
};
const m = new Module(file);
m.filename = file;
m.paths = [];
m._compile(fs.readFileSync(file, "utf8") + "\n;module.exports.__mapping = OLLAMA_CHAT_TEMPLATE_MAPPING;\n", file);
Module._load = load;
const mapping = m.exports.__mapping;
if (!Array.isArray(mapping) || mapping.length === 0) {
  console.error("extract-templates: no OLLAMA_CHAT_TEMPLATE_MAPPING in " + file);
  process.exit(1);
}

fs.mkdirSync(out, { recursive: true });
const seen = new Set();
const names = new Set();
const index = [];
for (const e of mapping) {
  if (typeof e.model !== "string" || typeof e.gguf !== "string") {
    console.error("extract-templates: malformed entry " + JSON.stringify(e).slice(0, 200));
    process.exit(1);
  }
  if (seen.has(e.gguf)) continue;
  seen.add(e.gguf);
  const base = e.model.replace(/^library\//, "").replace(/[^A-Za-z0-9._-]/g, "_");
  let name = base + ".jinja";
  for (let i = 2; names.has(name); i++) name = base + "-" + i + ".jinja";
  names.add(name);
  const bytes = Buffer.from(e.gguf, "utf8");
  fs.writeFileSync(path.join(out, name), bytes);
  index.push({ file: name, model: e.model, sha256: crypto.createHash("sha256").update(bytes).digest("hex") });
}
fs.writeFileSync(path.join(out, "index.json"), JSON.stringify(index, null, 1) + "\n");
console.log("fixtures: " + index.length + " templates from " + mapping.length + " entries");
