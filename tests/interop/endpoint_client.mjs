// A client on the TypeScript MCP SDK (npm) that takes an inventory of one
// Streamable HTTP endpoint (e.g. a gateway team endpoint /mcp/team): lists
// every tool (following nextCursor), the prompts and resources if the server
// declares those capabilities, and optionally calls one tool.
//
// Usage: node endpoint_client.mjs URL [--bearer TOKEN] [--call TOOLNAME [--args JSON]]
//
// Prints one JSON object: {"serverName": ..., "tools": [names],
// "prompts": [names], "resources": [uris], "call": CallToolResult or null}
// (a tool error is a result, {"isError": true, ...}, not a failure).
// On any failure it prints the error on stderr and exits 1 (2 for bad usage).
import { parseArgs } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const usage = "usage: node endpoint_client.mjs URL [--bearer TOKEN] [--call TOOLNAME [--args JSON]]";

function parse() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { bearer: { type: "string" }, call: { type: "string" }, args: { type: "string" } },
  });
  if (positionals.length !== 1 || (values.args !== undefined && values.call === undefined)) {
    throw new Error("wrong arguments");
  }
  const args = values.args === undefined ? {} : JSON.parse(values.args);
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    throw new Error("--args must be a JSON object");
  }
  return { url: new URL(positionals[0]), bearer: values.bearer, call: values.call, args };
}

// Every item of a paginated list method, following nextCursor.
async function all(list, key) {
  const items = [];
  let cursor;
  do {
    const page = await list(cursor === undefined ? {} : { cursor });
    items.push(...page[key]);
    cursor = page.nextCursor;
  } while (cursor !== undefined && cursor !== null);
  return items;
}

let options;
try {
  options = parse();
} catch (error) {
  console.error(`${usage}\n${error.message}`);
  process.exit(2);
}

const client = new Client({ name: "mcpmux-endpoint-client", version: "0" });
const transport = new StreamableHTTPClientTransport(options.url, {
  requestInit: options.bearer ? { headers: { Authorization: `Bearer ${options.bearer}` } } : undefined,
});
try {
  await client.connect(transport);
  const capabilities = client.getServerCapabilities() ?? {};
  const out = { serverName: client.getServerVersion()?.name ?? null, tools: [], prompts: [], resources: [], call: null };
  out.tools = (await all((p) => client.listTools(p), "tools")).map((t) => t.name);
  if (capabilities.prompts) {
    out.prompts = (await all((p) => client.listPrompts(p), "prompts")).map((p) => p.name);
  }
  if (capabilities.resources) {
    out.resources = (await all((p) => client.listResources(p), "resources")).map((r) => r.uri);
  }
  if (options.call !== undefined) {
    out.call = await client.callTool({ name: options.call, arguments: options.args });
  }
  await client.close();
  console.log(JSON.stringify(out));
} catch (error) {
  const cause = error?.cause ? ` (cause: ${error.cause.message ?? error.cause})` : "";
  console.error(`endpoint_client: ${error?.message ?? error}${cause}`);
  await client.close().catch(() => {});
  process.exit(1);
}
