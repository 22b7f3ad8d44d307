// The TypeScript MCP SDK 2 (@modelcontextprotocol/client, its own npm install) with `versionNegotiation: {mode:
// "auto"}`: it probes `server/discover` (its default mode does not yet; the SDK names auto as the default to come).
// FrozenLake episodes through an episode URL and `X-Session-ID` (where the server offers 2026-07-28) and through the
// plain `/frozen_lake/mcp` and `/mcp` (where it offers the handshake's versions: the client's protocol session plays
// an episode of its own); rewards read from `structuredContent`. Each way's failure is reported as its own.
//
// Usage: node mcp_ts_auto_episode.mjs CLIENT_DIR ORS_URL   (CLIENT_DIR: node_modules/@modelcontextprotocol/client;
// ORS_URL: a server whose default environment is frozen_lake)

import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { KEY, create, route } from "./_lake.mjs";

const [clientDir, base] = process.argv.slice(2);
const { Client, StreamableHTTPClientTransport } = await import(pathToFileURL(join(clientDir, "dist/index.mjs")).href);

async function play(url, headers = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { ...headers, ...KEY } } });
  const client = new Client({ name: "ors-ts-auto-test", version: "1.0.0" }, { versionNegotiation: { mode: "auto" } });
  try {
    await client.connect(transport);
    const prompt = (await client.getPrompt({ name: "task" })).messages[0].content.text;
    const grid = JSON.parse(prompt.split("Initial observation:\n")[1]).grid;
    const steps = [];
    for (const action of route(grid)) {
      const result = await client.callTool({ name: "lake_move", arguments: { action } });
      if (result.isError) throw new Error(`lake_move ${action}: ${JSON.stringify(result.content)}`);
      steps.push({ text: result.content[0].text, structured: result.structuredContent ?? null });
    }
    return { protocol_version: client.getNegotiatedProtocolVersion() ?? null, steps };
  } catch (error) {
    return { error: String(error?.message ?? error) };
  } finally {
    if (transport.sessionId) await transport.terminateSession().catch(() => {});
    await client.close().catch(() => {});
  }
}

const out = {
  episode_url: await play(`${base}/frozen_lake/mcp/episodes/${await create(base, 3, "mcp-ts-auto")}`),
  x_session_id: await play(`${base}/frozen_lake/mcp`, { "X-Session-ID": await create(base, 4, "mcp-ts-auto") }),
  plain_env_url: await play(`${base}/frozen_lake/mcp`),
  plain_default_url: await play(`${base}/mcp`),
};
process.stdout.write(`ORS-CLIENT-RESULT ${JSON.stringify(out)}\n`);
