// Drives a Parley gateway with the official OpenAI SDK (npm openai) and
// prints what it saw as one JSON object; TestOpenAISDK checks it.
// Env: OPENAI_SDK (the package's directory), PARLEY_URL, PARLEY_KEY,
// PARLEY_RIVAL_KEY (another client's key), PARLEY_SESSION (a new UUID).
const sdk = require(process.env.OPENAI_SDK);
const OpenAI = sdk.default;

const client = new OpenAI({ baseURL: process.env.PARLEY_URL + "/v1", apiKey: process.env.PARLEY_KEY, maxRetries: 0 });
const rival = new OpenAI({ baseURL: process.env.PARLEY_URL + "/v1", apiKey: process.env.PARLEY_RIVAL_KEY, maxRetries: 0 });
const session = { headers: { "X-Parley-Session": process.env.PARLEY_SESSION } };
const messages = [
  { role: "system", content: "You are Mira, the innkeeper." },
  { role: "user", content: "Hello! Any rooms free tonight?" },
];

// caught returns the class name and status of the error fn throws.
async function caught(fn) {
  try {
    await fn();
  } catch (err) {
    return { class: err.constructor.name, status: err.status, message: err.message, isAPIError: err instanceof sdk.APIError };
  }
  return { class: "none" };
}

async function main() {
  const out = { sdkVersion: require(process.env.OPENAI_SDK + "/package.json").version };

  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  out.models = models;

  const { data: completion, response } = await client.chat.completions
    .create({ model: "parley", messages, user: "player-1", max_tokens: 8, seed: 1 }, session)
    .withResponse();
  out.completion = {
    object: completion.object, content: completion.choices[0].message.content,
    finish: completion.choices[0].finish_reason, usage: completion.usage,
    session: response.headers.get("x-parley-session"),
  };

  const stream = await client.chat.completions.create(
    { model: "parley", messages: [...messages, { role: "assistant", content: completion.choices[0].message.content },
      { role: "user", content: "I'll take it." }], user: "player-1", max_tokens: 8, seed: 1, stream: true,
      stream_options: { include_usage: true } }, session);
  let content = "", finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.choices.length > 0) {
      content += chunk.choices[0].delta.content || "";
      finish = chunk.choices[0].finish_reason || finish;
    }
    if (chunk.usage) usage = { ...chunk.usage, choices: chunk.choices.length };
  }
  out.stream = { chunks, content, finish, usage };

  // A completion without the session header but with user: a session of one exchange.
  const single = await client.chat.completions.create({ model: "parley", messages, user: "player-2", max_tokens: 4, seed: 1 });
  out.single = { content: single.choices[0].message.content };

  out.errors = {
    n2: await caught(() => client.chat.completions.create({ model: "parley", messages, n: 2 })),
    tools: await caught(() => client.chat.completions.create({ model: "parley", messages,
      tools: [{ type: "function", function: { name: "open_door", parameters: { type: "object" } } }] })),
    badKey: await caught(() => new OpenAI({ baseURL: process.env.PARLEY_URL + "/v1", apiKey: "nope", maxRetries: 0 }).models.list()),
    rivalSession: await caught(() => rival.chat.completions.create({ model: "parley", messages, user: "player-1" }, session)),
    noUser: await caught(() => client.chat.completions.create({ model: "parley", messages },
      { headers: { "X-Parley-Session": "00000000-0000-7000-8000-000000000001" } })),
  };
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
