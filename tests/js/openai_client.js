// Drives a gateway with the official OpenAI client (npm `openai`), as users would.
// Usage: node openai_client.js BASE_URL API_KEY < ops.json > results.json
// ops: [{"api": "chat"|"completions", "body": {...}}]; body.stream selects streaming.
// Each result: {"response": ...} or {"chunks": [...]} or {"error": {"status", "type", "message"}}.
const path = require('path');
const fs = require('fs');
const OpenAI = require(path.join(__dirname, '../fixtures/node_modules/openai'));

async function run(client, op) {
  const endpoint = op.api === 'chat' ? client.chat.completions : client.completions;
  try {
    if (op.body.stream) {
      const stream = await endpoint.create(op.body);
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      return { chunks };
    }
    return { response: await endpoint.create(op.body) };
  } catch (e) {
    return { error: { status: e.status ?? null, type: e.type ?? null, message: String(e.message) } };
  }
}

async function main() {
  const [baseURL, apiKey] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey: apiKey || 'unused', maxRetries: 0, timeout: 30000 });
  const ops = JSON.parse(fs.readFileSync(0, 'utf8'));
  const results = [];
  for (const op of ops) results.push(await run(client, op));
  process.stdout.write(JSON.stringify(results));
}
main().catch((e) => { console.error(e); process.exit(1); });
