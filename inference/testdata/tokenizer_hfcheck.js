// Cross-checks Parley's tokenizer against Hugging Face's tokenizers library
// (the Rust crate, here through its Node binding) and writes the fixtures
// that tokenizer_hf_compat_test.go compares with:
//
//   tokenizer_hf.json      trained by Hugging Face on tokenizer_corpus.txt
//                          (its missing single bytes appended to the vocab,
//                          the chat template's special tokens added)
//   tokenizer_hf_ids.json  texts, and the ids Hugging Face gives them under
//                          tokenizer_go.json ("go") and tokenizer_hf.json ("hf")
//
// tokenizer_go.json is written by `go test ./inference -run TestTokenizerHFCompat -update-hf`.
// Run from the repository root:
//
//   npm install --prefix /tmp/hfcheck @anush008/tokenizers@0.6.0
//   NODE_PATH=/tmp/hfcheck/node_modules node inference/testdata/tokenizer_hfcheck.js
const fs = require("fs");
const path = require("path");
const tk = require("@anush008/tokenizers");

const dir = __dirname;
const specials = ["<|pad|>", "<|sys|>", "<|user|>", "<|npc|>", "<|end|>", "[Continue]", "[Terminate]"];

function byteLevelAlphabet() {
  const chars = [];
  for (let b = 0, n = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    chars.push(String.fromCodePoint(printable ? b : 256 + n++));
  }
  return chars;
}

function trainHF(corpus, out) {
  const t = new tk.Tokenizer(tk.BPE.empty());
  t.setPreTokenizer(tk.byteLevelPreTokenizer(false, true));
  t.train([corpus]);
  const tmp = out + ".tmp";
  t.save(tmp, false);
  const doc = JSON.parse(fs.readFileSync(tmp, "utf8"));
  fs.unlinkSync(tmp);
  const vocab = doc.model.vocab;
  let next = Object.keys(vocab).length;
  for (const c of byteLevelAlphabet()) {
    if (!(c in vocab)) vocab[c] = next++;
  }
  doc.added_tokens = specials.map((s) => ({
    id: next++, content: s, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
  }));
  doc.decoder = { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true };
  fs.writeFileSync(out, JSON.stringify(doc, null, 1) + "\n");
}

async function encodeAll(file, texts) {
  const t = tk.Tokenizer.fromFile(file);
  const all = [];
  for (const text of texts) {
    const ids = (await t.encode(text, null, { addSpecialTokens: true })).getIds();
    const back = await t.decode(ids, false);
    if (back !== text) throw new Error(`${file}: decode(encode(${JSON.stringify(text)})) = ${JSON.stringify(back)}`);
    all.push(ids);
  }
  return all;
}

(async () => {
  const corpus = path.join(dir, "tokenizer_corpus.txt");
  const lines = fs.readFileSync(corpus, "utf8").split(/(?<=\n)/);
  const texts = [
    ...lines,
    lines.join(""),
    "",
    "Good morning! Is the forge open today?",
    "I'll be back. We'll see who's right. DON'T 'S 's",
    "Deliver 12 letters, 3.14159 and 1,000,000 coins.",
    "龘靐齉爩 unseen Chinese, 🎉🔥⚔️🛡️ 👨‍👩‍👧‍👦 🇬🇧",
    "   three spaces first\n\n\nline\r\n\ttabs\t\t  trailing   ",
    "nbsp\u00a0here\u2003em\u3000ideographic \u0085 \u00ad soft",
    "<|sys|>be kind<|end|><|user|>hi<|end|><|npc|>",
    "ok[Continue][Terminate]<|pad|> <|end| <|end|> [Continue [Terminate]] <||>",
    "Привет, café 你好 مرحبا Καλημέρα ١٢٣ ½ Ⅻ",
    "\x00\x01\x7f control",
  ];
  const hfPath = path.join(dir, "tokenizer_hf.json");
  trainHF(corpus, hfPath);
  const out = {
    texts,
    go: await encodeAll(path.join(dir, "tokenizer_go.json"), texts),
    hf: await encodeAll(hfPath, texts),
  };
  fs.writeFileSync(path.join(dir, "tokenizer_hf_ids.json"), JSON.stringify(out) + "\n");
  console.log(`wrote ${texts.length} texts; vocab: go ${tk.Tokenizer.fromFile(path.join(dir, "tokenizer_go.json")).getVocabSize(true)}, hf ${tk.Tokenizer.fromFile(hfPath).getVocabSize(true)}`);
})().catch((e) => { console.error(e); process.exit(1); });
