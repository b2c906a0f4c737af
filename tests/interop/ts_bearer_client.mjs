// A client on the TypeScript MCP SDK (npm) that connects to the gateway
// over Streamable HTTP with `Authorization: Bearer TOKEN`, lists tools and
// calls alpha__echo; then tries once without the token and reports the
// status the SDK saw. Prints one JSON object.
//
// Usage: node ts_bearer_client.mjs URL TOKEN
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const out = {};

const client = new Client({ name: "ts-bearer", version: "0" });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
await client.connect(transport);
out.tools = (await client.listTools()).tools.map((t) => t.name);
const echo = await client.callTool({ name: "alpha__echo", arguments: { message: "from typescript" } });
out.echo = echo.content[0].text;
await client.close();

const anonymous = new Client({ name: "ts-anonymous", version: "0" });
try {
  await anonymous.connect(new StreamableHTTPClientTransport(new URL(url)));
  out.anonymous = "connected";
} catch (error) {
  out.anonymous = String(error && (error.code ?? error.message));
}
console.log(JSON.stringify(out));
