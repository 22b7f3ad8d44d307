// What both TypeScript client scripts share: the API key header, the FrozenLake route solver (breadth first, from
// `x` to `G` around the holes) and an ORS `/create` of a FrozenLake episode.

export const KEY = process.env.ORS_TEST_API_KEY ? { "X-API-Key": process.env.ORS_TEST_API_KEY } : {};
const MOVES = { LEFT: [0, -1], DOWN: [1, 0], RIGHT: [0, 1], UP: [-1, 0] };

export function route(grid) {
  const rows = grid.split("\n");
  const at = (r, c) => rows[r][c];
  let start;
  rows.forEach((row, r) => [...row].forEach((cell, c) => { if (cell === "x") start = [r, c]; }));
  const routes = new Map([[start.join(), []]]);
  const frontier = [start];
  while (frontier.length) {
    const [r, c] = frontier.shift();
    if (at(r, c) === "G") return routes.get([r, c].join());
    for (const [name, [dr, dc]] of Object.entries(MOVES)) {
      const [nr, nc] = [r + dr, c + dc];
      const key = [nr, nc].join();
      if (nr >= 0 && nr < rows.length && nc >= 0 && nc < rows[0].length && at(nr, nc) !== "H" && !routes.has(key)) {
        routes.set(key, [...routes.get([r, c].join()), name]);
        frontier.push([nr, nc]);
      }
    }
  }
  throw new Error(`no route on ${JSON.stringify(grid)}`);
}

export async function create(base, seed, prefix) {
  const sid = `${prefix}-${Math.random().toString(16).slice(2, 14)}`;
  const response = await fetch(`${base}/create`, {
    method: "POST",
    headers: { "X-Session-ID": sid, "Content-Type": "application/json", ...KEY },
    body: JSON.stringify({ env_name: "frozen_lake", task_spec: { seed } }),
  });
  if (response.status !== 200) throw new Error(`/create answered ${response.status}: ${await response.text()}`);
  return sid;
}
