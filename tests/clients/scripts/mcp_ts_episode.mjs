// The TypeScript MCP SDK (@modelcontextprotocol/sdk, its own npm install) in its default mode: FrozenLake episodes
// through an episode URL, through `X-Session-ID`, and through its protocol session at the plain `/frozen_lake/mcp`
// and `/mcp`; rewards read from `structuredContent`, next to the unchanged text.
//
// Usage: node mcp_ts_episode.mjs SDK_DIR ORS_URL   (SDK_DIR: the installed node_modules/@modelcontextprotocol/sdk;
// ORS_URL: a server whose default environment is frozen_lake)

import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { KEY, create, route } from "./_lake.mjs";

const [sdkDir, base] = process.argv.slice(2);
const load = (file) => import(pathToFileURL(join(sdkDir, "dist/esm/client", file)).href);
const { Client } = await load("index.js");
const { StreamableHTTPClientTransport } = await load("streamableHttp.js");

async function play(url, headers = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { ...headers, ...KEY } } });
  const client = new Client({ name: "ors-ts-test", version: "1.0.0" });
  await client.connect(transport);
  try {
    const prompt = (await client.getPrompt({ name: "task" })).messages[0].content.text;
    const grid = JSON.parse(prompt.split("Initial observation:\n")[1]).grid;
    const steps = [];
    for (const action of route(grid)) {
      const result = await client.callTool({ name: "lake_move", arguments: { action } });
      steps.push({ text: result.content[0].text, structured: result.structuredContent ?? null });
    }
    return { protocol_version: transport.protocolVersion ?? null, session_id: transport.sessionId ?? null, steps };
  } finally {
    await transport.terminateSession().catch(() => {});
    await client.close();
  }
}

const out = {
  episode_url: await play(`${base}/frozen_lake/mcp/episodes/${await create(base, 3, "mcp-ts")}`),
  x_session_id: await play(`${base}/frozen_lake/mcp`, { "X-Session-ID": await create(base, 4, "mcp-ts") }),
  protocol_session: await play(`${base}/frozen_lake/mcp`),
  plain_default_url: await play(`${base}/mcp`),
};
process.stdout.write(`ORS-CLIENT-RESULT ${JSON.stringify(out)}\n`);
