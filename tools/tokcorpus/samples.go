package main

// Hand-written samples. They exist for coverage (scripts, emoji sequences,
// code in languages the pinned modules do not contain), not for realism of
// frequency.

var uiStrings = []string{
	// English
	"Save changes", "Are you sure you want to delete this file?", "Welcome back, Anna!", "Your order has shipped.", "Settings", "Don't show this again", "It's 5 o'clock somewhere.", "I'll be there at 3:30pm.", "We've updated our Terms of Service.",
	// French, German, Spanish, Portuguese, Italian, Dutch, Polish, Czech, Turkish, Vietnamese, Romanian, Hungarian
	"Enregistrer les modifications", "Êtes-vous sûr de vouloir supprimer ce fichier ?", "Änderungen speichern", "Größe: 12 cm, Straße geschlossen", "¿Estás seguro? ¡Sí!", "Configurações avançadas", "Perché non funziona più?", "Wijzigingen opslaan", "Zażółć gęślą jaźń", "Příliš žluťoučký kůň úpěl ďábelské ódy", "Değişiklikleri kaydet, İstanbul'a gidiyorum", "Tiếng Việt có dấu: Cảm ơn bạn rất nhiều", "Şterge fişierul", "Árvíztűrő tükörfúrógép",
	// Cyrillic, Greek, Armenian, Georgian
	"Сохранить изменения", "Вы уверены, что хотите удалить этот файл?", "Зберегти зміни, ґанок, їжак", "Запази промените", "Αποθήκευση αλλαγών", "Είστε βέβαιοι; Ναι.", "Պահպանել փոփոխությունները", "ცვლილებების შენახვა", "გამარჯობა, მსოფლიო",
	// RTL
	"حفظ التغييرات", "هل أنت متأكد أنك تريد حذف هذا الملف؟", "مرحبا بالعالم ١٢٣", "שמור שינויים", "האם אתה בטוח?", "تغییرات را ذخیره کنید", "تبدیلیاں محفوظ کریں",
	// Indic
	"परिवर्तन सहेजें", "क्या आप निश्चित हैं?", "নতুন বার্তা পাঠান", "மாற்றங்களைச் சேமி", "మార్పులను సేవ్ చేయండి", "ಬದಲಾವಣೆಗಳನ್ನು ಉಳಿಸಿ", "മാറ്റങ്ങൾ സംരക്ഷിക്കുക", "ફેરફારો સાચવો", "ਤਬਦੀਲੀਆਂ ਸੰਭਾਲੋ", "වෙනස්කම් සුරකින්න", "ଅପରିବର୍ତ୍ତିତ",
	// Southeast Asian, Tibetan, Mongolian
	"บันทึกการเปลี่ยนแปลง", "คุณแน่ใจหรือไม่", "រក្សាទុកការផ្លាស់ប្តូរ", "ပြောင်းလဲမှုများကို သိမ်းဆည်းပါ", "ບັນທຶກການປ່ຽນແປງ", "བཀྲ་ཤིས་བདེ་ལེགས།", "ᠮᠣᠩᠭᠣᠯ ᠪᠢᠴᠢᠭ", "Монгол хэл",
	// African, others
	"ለውጦችን አስቀምጥ", "Hifadhi mabadiliko", "Ẹ ku aarọ", "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ", "ᐃᓄᒃᑎᑐᑦ", "ꦧꦱꦗꦮ", "Ⲙⲉⲧⲣⲉⲙⲛ̀ⲭⲏⲙⲓ",
	// CJK UI
	"保存更改", "您确定要删除此文件吗？", "設定を保存しました。", "ファイルを削除してもよろしいですか？", "변경 사항 저장", "정말로 삭제하시겠습니까?", "繁體中文：儲存變更",
}

var emojiSeqs = []string{
	"😀", "😂", "🥲", "🤖", "👍", "👍🏻", "👍🏽", "👍🏿", "❤️", "❤", "♥️", "✨", "🔥", "🚀", "🎉",
	"👨‍👩‍👧‍👦", "👩‍💻", "🧑🏽‍🚀", "🏳️‍🌈", "🏳️‍⚧️", "👁️‍🗨️", "🤷‍♀️", "🤦🏼‍♂️", "👩‍❤️‍💋‍👨", "🧔🏻‍♀️",
	"🇺🇸", "🇯🇵", "🇩🇪", "🇧🇷", "🇪🇺", "🇺🇳", "#️⃣", "*️⃣", "1️⃣", "🔟", "©️", "™️", "↩️", "🅰️", "🆗",
	"☺︎", "⌚", "⏱️", "🫠", "🫶🏾", "🪿", "🧌", "🇦", "🏴‍☠️", "😶‍🌫️", "❤️‍🔥", "🐈‍⬛",
}

// scriptBlocks are [lo, hi] code point ranges of letters, marks and digits
// across scripts, including blocks added in recent Unicode versions.
var scriptBlocks = [][2]int{
	{0x0041, 0x007A}, {0x00C0, 0x024F}, {0x0370, 0x03FF}, {0x0400, 0x04FF}, {0x0530, 0x058F}, {0x0590, 0x05FF},
	{0x0600, 0x06FF}, {0x0700, 0x074F}, {0x0780, 0x07BF}, {0x07C0, 0x07FF}, {0x0900, 0x097F}, {0x0980, 0x09FF},
	{0x0A00, 0x0A7F}, {0x0B80, 0x0BFF}, {0x0C00, 0x0C7F}, {0x0D00, 0x0D7F}, {0x0E00, 0x0E7F}, {0x0E80, 0x0EFF},
	{0x0F00, 0x0FFF}, {0x1000, 0x109F}, {0x10A0, 0x10FF}, {0x1100, 0x11FF}, {0x1200, 0x137F}, {0x13A0, 0x13FF},
	{0x1400, 0x167F}, {0x1780, 0x17FF}, {0x1800, 0x18AF}, {0x1E00, 0x1EFF}, {0x1F00, 0x1FFF}, {0x2C00, 0x2C5F},
	{0x2D30, 0x2D7F}, {0x3040, 0x30FF}, {0x3100, 0x312F}, {0x4E00, 0x9FFF}, {0xA000, 0xA48F}, {0xA500, 0xA63F},
	{0xA980, 0xA9DF}, {0xAC00, 0xD7A3}, {0xFB50, 0xFDFF}, {0xFF00, 0xFFEF}, {0x10400, 0x1044F}, {0x11000, 0x1107F},
	{0x11100, 0x1114F}, {0x11D00, 0x11D5F}, {0x16A40, 0x16A6F}, {0x1E900, 0x1E95F}, {0x1D400, 0x1D7FF},
	{0x20000, 0x2A6DF}, {0x2B740, 0x2B81F}, {0x30000, 0x3134F},
	// Blocks new in Unicode 16 (Go's tables are Unicode 15).
	{0x10D40, 0x10D8F}, {0x11380, 0x113FF}, {0x116D0, 0x116FF}, {0x11BC0, 0x11BFF}, {0x11F00, 0x11F5F}, {0x13460, 0x143FF}, {0x16100, 0x1613F}, {0x16D40, 0x16D7F}, {0x1E5D0, 0x1E5FF},
}

// specialStrings are added-token strings of the fixture models (and near
// misses), placed inside ordinary text.
var specialStrings = []string{
	"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|vision_start|>", "<|fim_prefix|>", "<tool_response>",
	"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<|reserved_special_token_0|>", "<|reserved_special_token_247|>", "<|finetune_right_pad_id|>",
	"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜place▁holder▁no▁5｜>", "<|EOT|>", "<think>",
	"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>", "<|startoftext|>", "<|endofprompt|>", "<|reserved_200000|>",
	"<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<unused0>", "<unused99>", "[multimodal]", "<0x41>", "<0xFF>",
	"<s>", "</s>", "[INST]", "[/INST]", "<<SYS>>", "<</SYS>>",
	"<|im_start|", "|im_start|>", "<||>", "<|im_start|><|im_start|>", "<|im_end|>\u0338",
}

var codeSnippets = []string{
	`def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


if __name__ == "__main__":
    print([fib(i) for i in range(10)])`,
	`import json
from dataclasses import dataclass, field

@dataclass
class Config:
    name: str
    retries: int = 3
    tags: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, ensure_ascii=False, indent=2)`,
	`async function fetchJSON(url, { timeout = 5000 } = {}) {
  const ctrl = new AbortController();
  const t = setTimeout(() => ctrl.abort(), timeout);
  try {
    const res = await fetch(url, { signal: ctrl.signal });
    if (!res.ok) throw new Error(` + "`HTTP ${res.status}`" + `);
    return await res.json();
  } finally {
    clearTimeout(t);
  }
}`,
	`const users = data.filter(u => u.active && u.age >= 18).map(({ id, name }) => ({ id, name: name.trim() }));
export default users;`,
	`fn main() {
    let v: Vec<u32> = (1..=10).filter(|x| x % 2 == 0).collect();
    println!("{:?}", v);
    let s = String::from("héllo");
    match s.chars().next() {
        Some(c) if c.is_alphabetic() => println!("letter {c}"),
        _ => {}
    }
}`,
	`SELECT u.id, u.email, COUNT(o.id) AS orders
FROM users u
LEFT JOIN orders o ON o.user_id = u.id AND o.created_at >= '2024-01-01'
WHERE u.deleted_at IS NULL
GROUP BY u.id, u.email
HAVING COUNT(o.id) > 5
ORDER BY orders DESC
LIMIT 100;`,
	`#!/usr/bin/env bash
set -euo pipefail
for f in "$@"; do
  if [[ -f "$f" ]]; then
    sha256sum "$f" | awk '{print $1}' >> sums.txt
  fi
done
echo "done: $(wc -l < sums.txt) files" >&2`,
	`#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int *p = malloc(sizeof(int) * 16);
    if (!p) return 1;
    for (int i = 0; i < 16; ++i) p[i] = i * i;
    printf("%d\n", p[15]);
    free(p);
    return 0;
}`,
	`<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>Test &amp; demo</title></head>
<body>
  <div class="container" data-id="42"><p>Hello, <b>world</b>!</p></div>
  <script>document.querySelector('.container').addEventListener('click', e => console.log(e));</script>
</body>
</html>`,
	`apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm
spec:
  replicas: 2
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.11.0
          args: ["--model", "Qwen/Qwen3-8B", "--max-model-len", "32768"]
          resources:
            limits:
              nvidia.com/gpu: 1`,
	`public class Main {
    public static void main(String[] args) {
        Map<String, List<Integer>> m = new HashMap<>();
        m.computeIfAbsent("a", k -> new ArrayList<>()).add(1);
        System.out.println(m);
    }
}`,
	`\begin{equation}
  \int_0^\infty e^{-x^2}\,dx = \frac{\sqrt{\pi}}{2}
\end{equation}
where $\alpha \in \mathbb{R}$ and $\sum_{i=1}^{n} i = \frac{n(n+1)}{2}$.`,
	"diff --git a/main.go b/main.go\n--- a/main.go\n+++ b/main.go\n@@ -1,5 +1,6 @@\n package main\n \n+import \"fmt\"\n func main() {\n-\tprintln(\"hi\")\n+\tfmt.Println(\"hi\")\n }\n",
	`    x = [1, 2, 3]	# tab	separated
	if x:
		return {'a': 1, "b": [None, True, False], 'c': 1e-07}`,
}
