// Encode throughput of HF's tokenizers (npm) on documents separated by \f in a file, one at
// a time (single-threaded calls), after one warm-up pass. Prints JSON {tokens_per_s, mb_per_s}.
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, '../fixtures/node_modules/tokenizers'));

async function main() {
  const tokenizer = Tokenizer.fromFile(process.argv[2]);
  const docs = fs.readFileSync(process.argv[3], 'utf8').split('\f');
  const rounds = Number(process.argv[4] || 3);
  let tokens = 0;
  for (const d of docs) tokens += (await tokenizer.encode(d, null, { addSpecialTokens: false })).getIds().length;
  const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d), 0);
  const start = process.hrtime.bigint();
  for (let r = 0; r < rounds; ++r) {
    for (const d of docs) await tokenizer.encode(d, null, { addSpecialTokens: false });
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(JSON.stringify({ tokens_per_s: (tokens * rounds) / seconds,
                               mb_per_s: (bytes * rounds) / seconds / 1e6 }));
}
main().catch((e) => { console.error(e); process.exit(1); });
