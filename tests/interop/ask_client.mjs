// A client on the TypeScript MCP SDK (npm) that declares sampling and
// elicitation and answers them with request handlers, as a host would.
// Connects over Streamable HTTP, calls PREFIX + server-everything's
// sampling and elicitation tools, and prints one JSON object with what the
// handlers saw and the tools' results.
//
// Usage: node ask_client.mjs URL PREFIX
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CreateMessageRequestSchema, ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, prefix] = process.argv.slice(2);
const out = { sampling_seen: [], elicitation_seen: [] };

const client = new Client(
  { name: "ts-asked", version: "0" },
  { capabilities: { sampling: {}, elicitation: {} } },
);
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  out.sampling_seen.push(request.params.messages[0].content.text);
  return {
    role: "assistant",
    content: { type: "text", text: "sampled by the typescript client" },
    model: "test-model",
    stopReason: "endTurn",
  };
});
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  out.elicitation_seen.push(request.params.message);
  return { action: "accept", content: { name: "Grace Hopper", check: true } };
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));

const text = (result) => result.content.map((c) => c.text ?? "").join("\n");
const sampled = await client.callTool({
  name: `${prefix}trigger-sampling-request`,
  arguments: { prompt: "hello from typescript" },
});
out.sampled = { error: Boolean(sampled.isError), text: text(sampled) };
const elicited = await client.callTool({ name: `${prefix}trigger-elicitation-request`, arguments: {} });
out.elicited = { error: Boolean(elicited.isError), text: text(elicited) };
await client.close();
console.log(JSON.stringify(out));
