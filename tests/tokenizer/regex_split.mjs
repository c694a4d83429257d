// regex_split.mjs: the pre-tokenizers' regexes run by JavaScript's own regex
// engine, for tests/tokenizer/check_regex_split.sh.
//   node regex_split.mjs OUT_CASES
// Writes, for each pre-tokenizer name and each of a few thousand seeded random
// strings, one line: the name, a tab, the string's UTF-8 bytes in hex, a tab,
// the byte offsets where its pieces end. The regexes are llama.cpp's lists for
// each name, applied in turn as a Sequence of Split(Isolated) applies them;
// \s and \S become \p{White_Space} and \P{White_Space}, what \s means to
// Oniguruma and to llama.cpp (JavaScript's \s differs at U+0085 and U+FEFF).
// Code points come from blocks assigned by Unicode 14.0 (the version of
// engine/tokenizer/unicode_data.c), so Node's newer Unicode tables classify them alike.
import fs from "node:fs";

const ws = (re) => re.replaceAll("\\s", "\\p{White_Space}").replaceAll("\\S", "\\P{White_Space}");
const LLM_LETTERS = "A-Za-z\\u00B5\\u00C0-\\u00D6\\u00D8-\\u00F6\\u00F8-\\u01BA\\u01BC-\\u01BF\\u01C4-\\u0293" +
  "\\u0295-\\u02AF\\u0370-\\u0373\\u0376\\u0377\\u037B-\\u037D\\u037F\\u0386\\u0388-\\u038A\\u038C" +
  "\\u038E-\\u03A1\\u03A3-\\u03F5\\u03F7-\\u0481\\u048A-\\u052F\\u0531-\\u0556\\u10A0-\\u10C5" +
  "\\u13A0-\\u13F5\\u13F8-\\u13FD\\u1C90-\\u1CBA\\u1CBD-\\u1CBF\\u1D00-\\u1D2B\\u1D6B-\\u1D77" +
  "\\u1D79-\\u1D9A\\u1E00-\\u1F15\\u1F18-\\u1F1D\\u1F20-\\u1F45\\u1F48-\\u1F4D\\u1F50-\\u1F57\\u1F59" +
  "\\u1F5B\\u1F5D\\u1F5F-\\u1F7D\\u1F80-\\u1FB4\\u1FB6-\\u1FBC\\u1FBE\\u1FC2-\\u1FC4\\u1FC6-\\u1FCC" +
  "\\u1FD0-\\u1FD3\\u1FD6-\\u1FDB\\u1FE0-\\u1FEC\\u1FF2-\\u1FF4\\u1FF6-\\u1FFC\\u2102\\u2107" +
  "\\u210A-\\u2113\\u2115\\u2119-\\u211D\\u2124\\u2126\\u2128\\u212A-\\u212D\\u212F-\\u2134\\u2139" +
  "\\u213C-\\u213F\\u2145-\\u2149\\u214E\\u2183\\u2184\\u2C00-\\u2C7B\\u2C7E-\\u2CE4\\u2CEB-\\u2CEE" +
  "\\u2CF2\\u2CF3\\uA640-\\uA66D\\uA680-\\uA69B\\uA722-\\uA76F\\uA771-\\uA787\\uA78B-\\uA78E" +
  "\\uAB70-\\uABBF\\uFB00-\\uFB06\\uFB13-\\uFB17\\uFF21-\\uFF3A\\uFF41-\\uFF5A\\u{10400}-\\u{1044F}" +
  "\\u{104B0}-\\u{104D3}\\u{104D8}-\\u{104FB}\\u{10C80}-\\u{10CB2}\\u{10CC0}-\\u{10CF2}" +
  "\\u{118A0}-\\u{118DF}\\u{1E900}-\\u{1E943}";
const KINDS = {
  "gpt-2": ["'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"],
  "deepseek-v3": [
    "\\p{N}{1,3}",
    "[\\u4E00-\\u9FA5\\u3040-\\u309F\\u30A0-\\u30FF]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  ],
  "deepseek-llm": [
    "[\\r\\n]",
    "\\s?[" + LLM_LETTERS + "]+",
    "\\s?[!-/:-~\\uFF01-\\uFF0F\\uFF1A-\\uFF5E\\u2018-\\u201F\\u3000-\\u3002]+",
    "\\s+$",
    "[\\u4E00-\\u9FA5\\u0800-\\u4E00\\uAC00-\\uD7FF]+",
    "\\p{N}+",
  ],
  "deepseek-coder": [
    "[\\r\\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[\\u4E00-\\u9FA5\\u0800-\\u4E00\\uAC00-\\uD7FF]+",
    "\\p{N}",
  ],
};

function split(pieces, re) {
  const out = [];
  for (const p of pieces) {
    let prev = 0;
    for (const m of p.matchAll(re)) {
      if (m.index > prev) out.push(p.slice(prev, m.index));
      out.push(m[0]);
      prev = m.index + m[0].length;
    }
    if (prev < p.length) out.push(p.slice(prev));
  }
  return out;
}

// Runs of characters from these ranges (all assigned by Unicode 14.0).
const POOL = [
  [0x20, 0x7e], [0x20, 0x20], [0x0a, 0x0a], [0x0d, 0x0d], [0x09, 0x09], [0x30, 0x39], [0x41, 0x5a],
  [0xa0, 0xff], [0x85, 0x85], [0x300, 0x36f], [0x370, 0x377], [0x37a, 0x37f], [0x384, 0x38a],
  [0x391, 0x3a1], [0x3a3, 0x3ff], [0x400, 0x52f], [0x531, 0x556], [0x5d0, 0x5ea], [0x620, 0x64a],
  [0x660, 0x669], [0x900, 0x97f], [0xe01, 0xe3a], [0x10a0, 0x10c5], [0x13a0, 0x13f5],
  [0x1c90, 0x1cba], [0x1e00, 0x1eff], [0x1f00, 0x1f15], [0x1f50, 0x1f7d], [0x1fb6, 0x1fc4],
  [0x1fd0, 0x1fdb], [0x2000, 0x200d], [0x2010, 0x2027], [0x2028, 0x2029], [0x202f, 0x205f],
  [0x20a0, 0x20bf], [0x2100, 0x214f], [0x2160, 0x2188], [0x2190, 0x21ff], [0x2460, 0x24ff],
  [0x2600, 0x26ff], [0x2c00, 0x2c5f], [0x3000, 0x303f], [0x3041, 0x3096], [0x3099, 0x30ff],
  [0x4e00, 0x4e80], [0x9f00, 0x9fff], [0xa640, 0xa66d], [0xa722, 0xa78e], [0xab70, 0xabbf],
  [0xac00, 0xac80], [0xd7b0, 0xd7c6], [0xfb00, 0xfb06], [0xfe00, 0xfe0f], [0xff01, 0xff5e],
  [0x10400, 0x1044f], [0x10c80, 0x10cb2], [0x1d400, 0x1d4ff], [0x1e900, 0x1e943],
  [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x1f3fb, 0x1f3ff], [0x1f1e6, 0x1f1ff],
];
let x = 0x2545f491;
const rnd = () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x; };
const strings = [];
for (let r = 0; r < 3000; r++) {
  let s = "";
  const runs = 1 + rnd() % 10;
  for (let i = 0; i < runs; i++) {
    const [a, b] = POOL[rnd() % POOL.length];
    const n = 1 + rnd() % 4;
    for (let j = 0; j < n; j++) s += String.fromCodePoint(a + rnd() % (b - a + 1));
  }
  strings.push(s);
}

const lines = [];
for (const [name, regexes] of Object.entries(KINDS)) {
  const res = regexes.map((r) => new RegExp(ws(r), "gu"));
  for (const s of strings) {
    let pieces = [s];
    for (const re of res) pieces = split(pieces, re);
    let at = 0;
    const ends = pieces.map((p) => (at += Buffer.byteLength(p, "utf8")));
    lines.push(name + "\t" + Buffer.from(s, "utf8").toString("hex") + "\t" + ends.join(" "));
  }
}
fs.writeFileSync(process.argv[2], lines.join("\n") + "\n");
console.log(`regex_split: ${strings.length} strings x ${Object.keys(KINDS).length} pre-tokenizers`);
