// Reference ids from HF's own tokenizers (npm `tokenizers`, the Rust library's Node binding).
// Usage: node tokenize_reference.js tokenizer.json < texts.jsonl > reference.jsonl
// Each input line: {"text": str, "special": bool}; each output line: {"ids": [...], "decoded": str}.
// An input line {"ids": [...]} is only decoded: output {"decoded": str}.
const path = require('path');
const readline = require('readline');
const { Tokenizer } = require(path.join(__dirname, '../fixtures/node_modules/tokenizers'));

async function main() {
  const tokenizer = Tokenizer.fromFile(process.argv[2]);
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const { text, special, ids: given } = JSON.parse(line);
    if (given) {
      process.stdout.write(JSON.stringify({ decoded: await tokenizer.decode(given, false) }) + '\n');
      continue;
    }
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: special });
    const ids = Array.from(encoding.getIds());
    const decoded = await tokenizer.decode(ids, false);
    process.stdout.write(JSON.stringify({ ids, decoded }) + '\n');
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
