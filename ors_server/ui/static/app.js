// The /ui pages. Everything shown comes from the server's REST API and is untrusted (agents' and environments'
// output): the DOM is built with createElement and textContent only, never from markup.
"use strict";

const POLL_MS = 2000;
const PAGE_SIZE = 50;

// DOM helpers.

function $(selector) {
  return document.querySelector(selector);
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null && value !== false) node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function notice(text, isError) {
  const node = $("#notice");
  if (!node) return;
  node.textContent = text || "";
  node.classList.toggle("error", Boolean(isError));
}

function json(value) {
  return JSON.stringify(value, null, 2);
}

// Short values on one line, longer ones indented.
function jsonShort(value) {
  const compact = JSON.stringify(value);
  return compact !== undefined && compact.length <= 100 ? compact : json(value);
}

function fmtReward(value) {
  if (value === null || value === undefined) return "";
  return Number.isInteger(value) ? String(value) : Number(value).toFixed(3);
}

function fmtTime(iso) {
  if (!iso) return "";
  const when = new Date(iso);
  return Number.isNaN(when.getTime()) ? String(iso) : when.toLocaleString();
}

function fmtLabels(labels) {
  return Object.entries(labels || {})
    .map(([key, value]) => `${key}=${value}`)
    .join(", ");
}

// The server. Requests carry the page's cookie (same origin); a 401 means the key is missing or changed, and
// reloading shows the login form.

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path, options) {
  const response = await fetch(path, { credentials: "same-origin", ...(options || {}) });
  if (response.status === 401) {
    location.reload();
    throw new ApiError(401, "the API key is needed");
  }
  const text = await response.text();
  if (!response.ok) {
    let detail = text;
    try {
      const parsed = JSON.parse(text);
      detail = typeof parsed.detail === "string" ? parsed.detail : json(parsed.detail ?? parsed);
    } catch (e) {
      // not JSON: show the text as it is
    }
    throw new ApiError(response.status, `${response.status}: ${detail}`);
  }
  return { response, text };
}

async function apiJson(path, options) {
  return JSON.parse((await api(path, options)).text);
}

// Content blocks: text as text, images as images (only from base64 data of an image type, as a data: URL).

const IMAGE_TYPE = /^image\/[A-Za-z0-9.+-]+$/;
const BASE64 = /^[A-Za-z0-9+/=\s]*$/;

function renderBlocks(blocks) {
  const box = el("div", { class: "blocks" });
  for (const block of blocks || []) {
    if (block && block.type === "image") {
      if (IMAGE_TYPE.test(block.mimeType || "") && BASE64.test(block.data || "")) {
        box.append(el("img", { class: "block-image", alt: "image block", src: `data:${block.mimeType};base64,${block.data}` }));
      } else {
        box.append(el("p", { class: "muted" }, "(an image the page cannot show)"));
      }
    } else if (block && typeof block.text === "string") {
      box.append(renderText(block.text));
    } else {
      box.append(el("pre", { class: "block-text" }, json(block)));
    }
  }
  return box;
}

// Text as it is meant to be read: a JSON object as its fields (a field of several lines, such as FrozenLake's
// `grid`, drawn as those lines), other JSON pretty-printed, anything else as it is (its newlines kept).
function renderText(text) {
  const value = parsedJson(text);
  if (value === undefined) return el("pre", { class: "block-text" }, text);
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return el("pre", { class: "block-json" }, json(value));
  }
  const fields = el("dl", { class: "block-fields" });
  for (const [name, field] of Object.entries(value)) {
    let shown;
    if (typeof field === "string" && field.includes("\n")) shown = el("pre", { class: "drawn" }, field);
    else if (typeof field === "string") shown = field;
    else if (field !== null && typeof field === "object") shown = el("pre", {}, jsonShort(field));
    else shown = String(field);
    fields.append(el("dt", {}, name), el("dd", {}, shown));
  }
  return fields;
}

function parsedJson(text) {
  const trimmed = text.trim();
  if (!(trimmed.startsWith("{") || trimmed.startsWith("["))) return undefined;
  try {
    return JSON.parse(trimmed);
  } catch (error) {
    return undefined;
  }
}

// What an episode's status reads as: a finished episode whose session is still open is "finished", not "live".
function statusOf(episode) {
  if (episode.status !== "live") return "ended";
  return episode.finished ? "finished" : "live";
}

function fmtTask(task) {
  if (task === null || task === undefined) return "";
  const text = typeof task === "string" ? task : JSON.stringify(task);
  return text.length > 60 ? `${text.slice(0, 59)}…` : text;
}

function fmtMean(value) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(3);
}

// Sortable tables: a click on a header with `data-sort` orders the rows by that field (again: the other way).
// `rows` are [value record, row element] pairs; the order holds across refreshes.
class SortedTable {
  constructor(table, onChange) {
    this.table = table;
    this.field = null;
    this.descending = false;
    for (const th of table.querySelectorAll("th[data-sort]")) {
      th.classList.add("sortable");
      th.setAttribute("tabindex", "0");
      const choose = () => {
        this.descending = this.field === th.dataset.sort ? !this.descending : false;
        this.field = th.dataset.sort;
        for (const other of table.querySelectorAll("th[data-sort]")) other.removeAttribute("aria-sort");
        th.setAttribute("aria-sort", this.descending ? "descending" : "ascending");
        onChange();
      };
      th.addEventListener("click", choose);
      th.addEventListener("keydown", (event) => {
        if (event.key === "Enter") choose();
      });
    }
  }

  show(rows) {
    if (this.field) {
      const field = this.field;
      const key = (record) => {
        const value = record[field];
        if (value === null || value === undefined) return "";
        return typeof value === "object" ? JSON.stringify(value) : value;
      };
      rows = [...rows].sort(([a], [b]) => {
        const x = key(a);
        const y = key(b);
        const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
        return this.descending ? -order : order;
      });
    }
    this.table.querySelector("tbody").replaceChildren(...rows.map(([, row]) => row));
  }
}

// The figures of a set of episodes (`/episodes/stats` without group_by): how many, mean reward, mean steps.
function renderOverview(node, groups) {
  const all = groups[0] || { episodes: 0, live: 0, finished: 0, mean_reward: null, mean_steps: null };
  const facts = [
    ["Episodes", all.episodes, "episodes"],
    ["Live", all.live, "live"],
    ["Finished", all.finished, "finished"],
    ["Mean reward", fmtMean(all.mean_reward), "mean-reward"],
    ["Mean steps", fmtMean(all.mean_steps), "mean-steps"],
  ];
  node.replaceChildren(...facts.flatMap(([name, value, id]) => [el("dt", {}, name), el("dd", { "data-figure": id }, value)]));
}

// The episodes list.

// The filters of a form (env, status, labels as "k=v,k2=v2") as query parameters of /episodes and its stats.
function filterParams(form) {
  const params = new URLSearchParams();
  const data = new FormData(form);
  if (data.get("env")) params.set("env", data.get("env"));
  if (data.get("status")) params.set("status", data.get("status"));
  for (const pair of String(data.get("labels") || "").split(",")) {
    const [key, ...rest] = pair.split("=");
    if (key.trim() && rest.length) params.set(`label.${key.trim()}`, rest.join("=").trim());
  }
  return params;
}

function episodesQuery(form, cursor) {
  const params = filterParams(form);
  params.set("limit", String(PAGE_SIZE));
  if (cursor) params.set("cursor", cursor);
  return params;
}

function episodeRow(episode) {
  const link = el("a", { href: `/ui/episode?id=${encodeURIComponent(episode.id)}` }, episode.id);
  const status = statusOf(episode);
  return el(
    "tr",
    { "data-id": episode.id, "data-status": episode.status },
    el("td", {}, link),
    el("td", {}, episode.env),
    el("td", { class: "task", title: episode.task === undefined ? "" : JSON.stringify(episode.task) }, fmtTask(episode.task)),
    el("td", {}, el("span", { class: `badge ${status === "ended" ? "ended" : "live"}` }, status)),
    el("td", {}, episode.face),
    el("td", {}, fmtLabels(episode.labels)),
    el("td", { title: episode.started_at || "" }, fmtTime(episode.started_at)),
    el("td", { class: "num" }, episode.steps),
    el("td", { class: "num" }, fmtReward(episode.reward)),
    el("td", {}, episode.finished ? "yes" : "no"),
    el("td", {}, episode.end_reason || ""),
  );
}

// Fill a filters form from the page's URL (`/ui?env=math&labels=run=A`), as the form itself writes it.
function formFromUrl(form, names) {
  const params = new URLSearchParams(location.search);
  for (const name of names) {
    if (params.has(name) && form.elements[name]) form.elements[name].value = params.get(name);
  }
}

function urlFromForm(form, path) {
  const shown = new URLSearchParams();
  for (const [name, value] of new FormData(form)) if (value) shown.set(name, value);
  history.replaceState(null, "", `${path}${shown.toString() ? "?" + shown : ""}`);
}

async function episodesPage() {
  const form = $("#filters");
  const more = $("#more");
  formFromUrl(form, ["env", "status", "labels"]);
  let pages = 1;
  let episodes = [];
  const table = new SortedTable($("#episodes"), () => table.show(episodes));
  form.addEventListener("submit", () => {
    pages = 1; // before pollRecords' own listener reloads
  });
  const refresh = pollRecords(form, "/ui", async () => {
    const rows = [];
    let cursor = null;
    let next = null;
    for (let page = 0; page < pages; page++) {
      const answer = await apiJson(`/episodes?${episodesQuery(form, cursor)}`);
      rows.push(...answer.episodes.map((episode) => [{ ...episode, status: statusOf(episode) }, episodeRow(episode)]));
      next = answer.next;
      if (!next) break;
      cursor = next;
    }
    const stats = await apiJson(`/episodes/stats?${filterParams(form)}`);
    renderOverview($("#overview"), stats.groups);
    episodes = rows;
    table.show(episodes);
    more.hidden = !next;
    notice(rows.length ? "" : "No episodes match.");
  });
  more.addEventListener("click", () => {
    pages += 1;
    refresh();
  });
  await refresh();
}

// A page drawn from the records and redrawn every POLL_MS while it is visible: `load` draws it; the filter form
// redraws it and keeps its fields in the address; records switched off (404) stop the polling with a notice.
// Returns the redraw (it skips while one runs or the form is invalid).
function pollRecords(form, path, load) {
  let busy = false;
  async function refresh() {
    if (busy || !form.reportValidity()) return;
    busy = true;
    try {
      await load();
    } catch (error) {
      if (error.status === 404) {
        clearInterval(polling); // records are off: nothing will appear
        notice("This server keeps no episode records (--records off).", true);
      } else {
        notice(error.message, true);
      }
    } finally {
      busy = false;
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    urlFromForm(form, path);
    refresh();
  });
  apiJson("/list_environments")
    .then((names) => $("#env-names").replaceChildren(...names.map((name) => el("option", { value: name }))))
    .catch(() => {});
  const polling = setInterval(() => {
    if (!document.hidden) refresh();
  }, POLL_MS);
  return refresh;
}

// Runs: groups of episodes (by a label, `run` by default) side by side, and their mean reward over time.

const SERIES = 8; // colours in the style sheet (.series-0 ... .series-7)
const CHART_POINTS = 60; // about this many buckets across the episodes' span

function groupRow(group, index) {
  const name = group.key === null ? "(no label)" : group.key;
  return el(
    "tr",
    { "data-key": name },
    el("td", {}, el("span", { class: `swatch series-${index % SERIES}` }), " ", name),
    el("td", { class: "num" }, group.episodes),
    el("td", { class: "num" }, group.live),
    el("td", { class: "num" }, group.finished),
    el("td", { class: "num" }, fmtMean(group.mean_reward)),
    el("td", { class: "num" }, fmtReward(group.min_reward)),
    el("td", { class: "num" }, fmtReward(group.max_reward)),
    el("td", { class: "num" }, fmtMean(group.mean_steps)),
    el("td", { title: group.last_started_at || "" }, fmtTime(group.last_started_at)),
  );
}

// One line per group: the mean reward of the episodes started in each bucket of time.
function runsChart(groups, bucket) {
  const width = 760;
  const height = 220;
  const pad = 34;
  const points = groups.flatMap((g) => g.over_time.map((p) => [Date.parse(p.start), p.mean_reward]));
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "reward-plot runs-chart", role: "img", "aria-label": "mean reward over time, by group" });
  if (!points.length) return el("p", { class: "muted" }, "No episodes yet.");
  let [early, late] = [Math.min(...points.map((p) => p[0])), Math.max(...points.map((p) => p[0]))];
  if (late === early) late = early + bucket * 1000;
  let low = Math.min(0, ...points.map((p) => p[1]));
  let high = Math.max(...points.map((p) => p[1]));
  if (high === low) high = low + 1;
  const x = (t) => pad + ((t - early) * (width - 2 * pad)) / (late - early);
  const y = (v) => height - pad - ((v - low) * (height - 2 * pad)) / (high - low);
  chart.append(
    svg("line", { x1: pad, x2: width - pad, y1: y(low), y2: y(low), class: "axis" }),
    svg("text", { x: 2, y: y(high) + 4, class: "tick" }, fmtReward(high)),
    svg("text", { x: 2, y: y(low) + 4, class: "tick" }, fmtReward(low)),
    svg("text", { x: pad, y: height - 8, class: "tick" }, new Date(early).toLocaleTimeString()),
    svg("text", { x: width - pad, y: height - 8, class: "tick", "text-anchor": "end" }, new Date(late).toLocaleTimeString()),
  );
  groups.forEach((group, index) => {
    const name = group.key === null ? "(no label)" : group.key;
    const line = group.over_time.map((p) => `${x(Date.parse(p.start))},${y(p.mean_reward)}`).join(" ");
    const series = svg("g", { class: `series series-${index % SERIES}`, "data-key": name });
    series.append(svg("polyline", { points: line, class: "line" }));
    for (const p of group.over_time) {
      series.append(svg("circle", { cx: x(Date.parse(p.start)), cy: y(p.mean_reward), r: 3 }, svg("title", {}, `${name}, ${fmtTime(p.start)}: mean reward ${fmtMean(p.mean_reward)} over ${p.episodes} episodes`)));
    }
    chart.append(series);
  });
  const legend = el("p", { class: "legend muted" }, `each point: the mean reward of the episodes started in ${bucketText(bucket)}`);
  return el("div", {}, chart, legend);
}

function bucketText(seconds) {
  if (seconds % 86400 === 0) return `${seconds / 86400} d`;
  if (seconds % 3600 === 0) return `${seconds / 3600} h`;
  if (seconds % 60 === 0) return `${seconds / 60} min`;
  return `${seconds} s`;
}

const BUCKETS = [1, 5, 10, 30, 60, 300, 600, 1800, 3600, 4 * 3600, 86400, 7 * 86400];

async function runsPage() {
  const form = $("#filters");
  formFromUrl(form, ["by", "env", "status", "labels"]);
  let groups = [];
  const table = new SortedTable($("#groups"), () => table.show(groups));
  const refresh = pollRecords(form, "/ui/runs", async () => {
    const params = filterParams(form);
    params.set("group_by", `label.${new FormData(form).get("by").trim()}`);
    const overall = (await apiJson(`/episodes/stats?${filterParams(form)}`)).groups[0];
    let bucket = 1;
    if (overall) {
      const span = (Date.parse(overall.last_started_at) - Date.parse(overall.first_started_at)) / 1000;
      bucket = BUCKETS.find((b) => span / b <= CHART_POINTS) || BUCKETS[BUCKETS.length - 1];
    }
    params.set("bucket", String(bucket));
    const answer = await apiJson(`/episodes/stats?${params}`);
    groups = answer.groups.map((group, index) => [group, groupRow(group, index)]);
    table.show(groups);
    $("#chart").replaceChildren(runsChart(answer.groups, bucket));
    notice(answer.groups.length ? "" : "No episodes match.");
  });
  await refresh();
}

// One episode.

function rewardPlot(steps) {
  const width = 600;
  const height = 160;
  const pad = 28;
  // The steps are the model's calls the environment accepted (a refused call changes nothing, as in the step
  // count; the calls a CodeAct step's code made are in their step's reward).
  const rewards = steps
    .filter((call) => call.ok && call.output)
    .map((call) => (typeof call.output.reward === "number" ? call.output.reward : 0));
  const totals = [];
  rewards.reduce((sum, reward, i) => (totals[i] = sum + reward), 0);
  const values = [0, ...rewards, ...totals];
  let low = Math.min(...values);
  let high = Math.max(...values);
  if (high === low) high = low + 1;
  const x = (i) => pad + (rewards.length <= 1 ? (width - 2 * pad) / 2 : (i * (width - 2 * pad)) / (rewards.length - 1));
  const y = (v) => height - pad - ((v - low) * (height - 2 * pad)) / (high - low);
  const plot = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "reward-plot", role: "img", "aria-label": "reward over the steps" });
  plot.append(
    svg("line", { x1: pad, x2: width - pad, y1: y(0), y2: y(0), class: "axis" }),
    svg("text", { x: 2, y: y(high) + 4, class: "tick" }, fmtReward(high)),
    svg("text", { x: 2, y: y(low) + 4, class: "tick" }, fmtReward(low)),
  );
  if (rewards.length) {
    plot.append(svg("polyline", { points: totals.map((t, i) => `${x(i)},${y(t)}`).join(" "), class: "total" }));
    rewards.forEach((reward, i) => {
      plot.append(svg("circle", { cx: x(i), cy: y(reward), r: 3, class: "step" }, svg("title", {}, `step ${i + 1}: ${reward} (total ${totals[i]})`)));
    });
  }
  const legend = el("p", { class: "legend muted" }, `${rewards.length} steps · dots: each step's reward · line: the running total`);
  return el("div", {}, plot, legend);
}

// The model's calls in order, each with the calls its CodeAct code made (they name their step's id; they are
// recorded before it, as they end first). Calls of a step still running wait under a step of their own.
function modelSteps(calls) {
  const inner = new Map();
  for (const call of calls) {
    if (!call.step) continue;
    if (!inner.has(call.step)) inner.set(call.step, []);
    inner.get(call.step).push(call);
  }
  const steps = calls.filter((call) => !call.step).map((call) => ({ call, inner: (call.id && inner.get(call.id)) || [] }));
  const known = new Set(steps.map(({ call }) => call.id));
  for (const [step, made] of inner) {
    if (!known.has(step)) steps.push({ call: null, step, inner: made });
  }
  return steps;
}

function labelled(name, ...content) {
  return el("div", { class: "part" }, el("div", { class: "part-label" }, name), ...content);
}

function argumentsPart(call) {
  const args = call.arguments ?? {};
  if (call.tool === "execute_code" && typeof args.code === "string") {
    return labelled("code", el("pre", { class: "code" }, el("code", {}, args.code)));
  }
  return labelled("arguments", el("pre", {}, jsonShort(args)));
}

function outcomePart(call) {
  if (call.ok && call.output) {
    return labelled(
      "output",
      renderBlocks(call.output.blocks),
      el("p", { class: "call-result" }, `reward ${fmtReward(call.output.reward) || "none"} · finished ${call.output.finished ? "yes" : "no"}`),
      call.output.metadata ? el("details", {}, el("summary", {}, "metadata"), el("pre", {}, json(call.output.metadata))) : null,
    );
  }
  return labelled("error", el("pre", { class: "error" }, typeof call.error === "string" ? call.error : json(call.error)));
}

function callHead(call, number) {
  return el(
    "div",
    { class: "call-head" },
    el("strong", {}, `${number} ${call.tool}`),
    " ",
    el("span", { class: `badge ${call.ok ? "ok" : "failed"}` }, call.ok ? "ok" : call.reason || "error"),
    ` ${call.face || ""} · ${fmtTime(call.started_at)} · ${call.duration_ms ?? "?"} ms`,
  );
}

function stepItem({ call, inner }, index) {
  const number = `#${index + 1}`;
  const item = el("li", { class: "call", "data-index": index });
  if (call) {
    item.setAttribute("data-id", call.id || "");
    item.append(callHead(call, number), argumentsPart(call), outcomePart(call));
  } else {
    item.append(el("div", { class: "call-head" }, el("strong", {}, `${number} execute_code`), " ", el("span", { class: "badge live" }, "running")));
  }
  if (inner.length) {
    const list = el("ol", { class: "calls inner-calls" });
    inner.forEach((made, j) => {
      list.append(el("li", { class: "call inner", "data-id": made.id || "" }, callHead(made, `${number}.${j + 1}`), argumentsPart(made), outcomePart(made)));
    });
    item.append(el("details", { class: "inner", open: true }, el("summary", {}, `${inner.length} tool calls made by the code`), list));
  }
  return item;
}

function renderEpisode(episode) {
  $("#episode-id").textContent = episode.id;
  const live = $("#live");
  const status = statusOf(episode);
  live.textContent = status;
  live.className = `badge ${status === "ended" ? "ended" : "live"}`;
  const facts = [
    ["Environment", episode.env],
    ["Session", episode.session_id],
    ["Face", episode.face],
    ["Labels", fmtLabels(episode.labels)],
    ["Started", fmtTime(episode.started_at)],
    ["Ended", episode.ended_at ? `${fmtTime(episode.ended_at)} (${episode.end_reason || "?"})` : "not yet"],
    ["Steps", episode.steps],
    ["Reward", fmtReward(episode.reward)],
    ["Finished", episode.finished ? "yes" : "no"],
  ];
  $("#summary").replaceChildren(...facts.flatMap(([name, value]) => [el("dt", {}, name), el("dd", {}, value ?? "")]));
  $("#task").textContent = json(episode.task ?? null);
  const prompt = episode.prompt;
  $("#prompt").replaceChildren(Array.isArray(prompt) ? renderBlocks(prompt) : el("pre", {}, typeof prompt === "string" ? prompt : json(prompt)));
  const steps = modelSteps(episode.calls || []);
  $("#plot").replaceChildren(rewardPlot(steps.filter(({ call }) => call).map(({ call }) => call)));
  $("#calls").replaceChildren(...steps.map(stepItem));
  $("#content").hidden = false;
}

// An episode's calls come a page at a time (`calls_next` names the next page): read them all.
async function readEpisode(path) {
  const episode = await apiJson(path);
  let next = episode.calls_next;
  while (next !== null && next !== undefined) {
    const page = await apiJson(`${path}?calls_cursor=${encodeURIComponent(next)}`);
    episode.calls.push(...page.calls);
    next = page.calls_next;
  }
  return episode;
}

async function episodePage() {
  const id = new URLSearchParams(location.search).get("id") || "";
  if (!id) {
    $("main h1").hidden = true;
    notice("No episode named: open one from the list.", true);
    return;
  }
  const path = `/episodes/${encodeURIComponent(id)}`;
  let loading = false;
  let again = false;
  let lastError = null;

  // Each event only says that something happened: the page reads the record again (coalescing a burst of events
  // into one read), so what it shows is always the server's whole record.
  async function load() {
    if (loading) {
      again = true;
      return null;
    }
    loading = true;
    try {
      let episode;
      do {
        again = false;
        episode = await readEpisode(path);
        renderEpisode(episode);
      } while (again);
      notice("");
      return episode;
    } catch (error) {
      lastError = error;
      notice(error.message, true);
      return null;
    } finally {
      loading = false;
    }
  }

  // An episode reaches the records within a second of starting: a page opened sooner waits for it, a little.
  let episode = await load();
  for (let tries = 0; !episode && tries < 10 && lastError && lastError.status === 404; tries++) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    episode = await load();
  }
  if (!episode && lastError && lastError.status === 404) {
    $("main h1").hidden = true; // one message, not the headings of an episode that is not there
    notice(`No episode ${id} is recorded here.`, true);
    return;
  }
  if (!episode || episode.status !== "live") return;
  const events = new EventSource(`${path}/events`);
  let ended = false;
  const reread = () => load();
  events.addEventListener("call", reread);
  events.addEventListener("message", reread);
  events.addEventListener("end", () => {
    ended = true;
    events.close();
    load();
  });
  events.addEventListener("error", () => {
    // The stream broke off (the browser retries by itself); read the record now so nothing is missed meanwhile.
    if (!ended) load();
  });
}

// Play mode: a session of any environment, driven by hand through the ORS endpoints.

function resolveRef(schema, root) {
  let seen = 0;
  while (schema && schema.$ref && seen++ < 32) {
    const name = schema.$ref.split("/").pop();
    schema = (root.$defs || root.definitions || {})[name];
  }
  return schema || {};
}

function typesOf(schema) {
  return (Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : []).filter((t) => t !== "null");
}

// One form field for one property of a tool's input schema: scalars get inputs of their kind, enums a list,
// anything else JSON text. read() is the value (undefined to leave the property out) or throws a message.
function schemaField(name, property, required, root) {
  let schema = resolveRef(property, root);
  let variants = null;
  const union = schema.anyOf || schema.oneOf;
  if (union) {
    const kinds = union.map((v) => resolveRef(v, root)).filter((v) => v.type !== "null");
    if (kinds.length === 1) schema = { ...kinds[0], description: schema.description ?? kinds[0].description, default: schema.default };
    else variants = kinds;
  }
  const types = typesOf(schema);
  const id = `field-${name}`;
  const label = el("label", { for: id }, name, required ? " *" : "");
  const hint = schema.description ? el("small", { class: "muted" }, schema.description) : null;
  const hasDefault = Object.prototype.hasOwnProperty.call(schema, "default");
  let input;
  let read;
  const empty = () => {
    if (required) throw new Error(`${name} is required`);
    return undefined;
  };

  if (Array.isArray(schema.enum)) {
    input = el("select", { id, name });
    if (!required) input.append(el("option", { value: "" }, "(none)"));
    for (const value of schema.enum) input.append(el("option", { value: JSON.stringify(value) }, String(value)));
    if (hasDefault) input.value = JSON.stringify(schema.default);
    read = () => (input.value === "" ? empty() : JSON.parse(input.value));
  } else if (!variants && types.length === 1 && types[0] === "boolean") {
    input = el("input", { id, name, type: "checkbox" });
    input.checked = Boolean(schema.default);
    read = () => input.checked;
  } else if (!variants && types.length === 1 && (types[0] === "integer" || types[0] === "number")) {
    input = el("input", { id, name, type: "number", step: types[0] === "integer" ? "1" : "any" });
    if (hasDefault && schema.default !== null) input.value = String(schema.default);
    read = () => {
      if (input.value.trim() === "") return empty();
      const value = Number(input.value);
      if (Number.isNaN(value) || (types[0] === "integer" && !Number.isInteger(value))) throw new Error(`${name} must be ${types[0] === "integer" ? "an integer" : "a number"}`);
      return value;
    };
  } else if (!variants && types.length === 1 && types[0] === "string") {
    input = el("input", { id, name, type: "text", autocomplete: "off" });
    if (hasDefault && schema.default !== null) input.value = String(schema.default);
    read = () => (input.value === "" && !required ? undefined : input.value);
  } else if (variants && variants.every((v) => typesOf(v).every((t) => ["string", "number", "integer", "boolean"].includes(t)))) {
    // A union of scalars (a number or a string, say): a number where one is allowed, else the text.
    const allowed = new Set(variants.flatMap(typesOf));
    input = el("input", { id, name, type: "text", autocomplete: "off" });
    if (hasDefault && schema.default !== null) input.value = String(schema.default);
    read = () => {
      const text = input.value;
      if (text.trim() === "") return allowed.has("string") && required ? text : empty();
      const number = Number(text);
      if ((allowed.has("number") || (allowed.has("integer") && Number.isInteger(number))) && text.trim() !== "" && !Number.isNaN(number)) return number;
      if (allowed.has("boolean") && (text === "true" || text === "false")) return text === "true";
      if (allowed.has("string")) return text;
      throw new Error(`${name}: not one of ${[...allowed].join(", ")}`);
    };
  } else {
    input = el("textarea", { id, name, rows: 3, placeholder: "JSON", spellcheck: "false" });
    if (hasDefault) input.value = JSON.stringify(schema.default);
    read = () => {
      if (input.value.trim() === "") return empty();
      try {
        return JSON.parse(input.value);
      } catch (error) {
        throw new Error(`${name} is not valid JSON`);
      }
    };
  }
  return { row: el("div", { class: "field" }, label, input, hint), name, read };
}

function toolForm(tool) {
  const schema = tool.input_schema || {};
  const required = new Set(schema.required || []);
  return Object.entries(schema.properties || {}).map(([name, property]) => schemaField(name, property, required.has(name), schema));
}

// The events of an ORS call's SSE body: [{event, data}], comments dropped.
function parseSse(text) {
  const events = [];
  for (const chunk of text.split(/\r\n\r\n|\n\n|\r\r/)) {
    let name = "message";
    const data = [];
    for (const line of chunk.split(/\r\n|\n|\r/)) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") name = value;
      else if (field === "data") data.push(value);
    }
    if (data.length || name !== "message") events.push({ event: name, data: data.join("\n") });
  }
  return events;
}

// The result of an ORS call from its events: `chunk`s then `end` join into one JSON value; `error` is a crash.
function callResult(events) {
  let body = "";
  for (const { event, data } of events) {
    if (event === "chunk") body += data;
    else if (event === "end") return JSON.parse(body + data);
    else if (event === "error") return { ok: false, error: data, reason: "error" };
  }
  return { ok: false, error: "the call's stream ended without a result" };
}

async function playPage() {
  const envSelect = $("#env");
  const splitSelect = $("#split");
  let session = null; // {sid, env, tools, ping, total}

  const headers = () => ({ "X-Session-ID": session.sid });
  const envPath = (rest) => `/${encodeURIComponent(session.env)}${rest}`;

  async function loadSplits() {
    splitSelect.replaceChildren();
    try {
      const splits = await apiJson(`/${encodeURIComponent(envSelect.value)}/splits`);
      splitSelect.replaceChildren(...splits.map((split) => el("option", { value: split.name }, split.name)));
    } catch (error) {
      notice(error.message, true);
    }
  }

  function showTool() {
    const tool = session.tools.find((t) => t.name === $("#tool").value);
    $("#tool-description").textContent = tool ? tool.description || "" : "";
    session.fields = tool ? toolForm(tool) : [];
    $("#fields").replaceChildren(...session.fields.map((field) => field.row));
  }

  function setFinished(finished) {
    $("#state").textContent = finished ? "finished" : "running";
    $("#state").className = `badge ${finished ? "ended" : "live"}`;
    $("#call-button").disabled = finished;
  }

  async function start(event) {
    event.preventDefault();
    if (session) await end();
    notice("Starting…");
    $("#start-button").disabled = true;
    try {
      const env = envSelect.value;
      const { sid } = await apiJson("/create_session", { method: "POST" });
      session = { sid, env, tools: [], total: 0, ping: null, fields: [], calls: 0 };
      const created = await api("/create", {
        method: "POST",
        headers: { ...headers(), "Content-Type": "application/json", "X-Episode-Labels": "via=ui" },
        body: JSON.stringify({ env_name: env, split: splitSelect.value, index: Number($("#index").value || 0) }),
      });
      // Keep the session from being reaped while a person thinks: ping at a third of its idle timeout.
      const timeout = Number(created.response.headers.get("X-Session-Timeout")) || 60;
      session.ping = setInterval(() => api("/ping", { method: "POST", headers: headers() }).catch(() => {}), (timeout * 1000) / 3);
      $("#sid").textContent = sid;
      $("#episode-link").setAttribute("href", `/ui/episode?id=${encodeURIComponent(sid)}`);
      $("#total").textContent = "0";
      $("#results").replaceChildren();
      $("#session").hidden = false;
      setFinished(false);
      const prompt = await apiJson(envPath("/prompt"), { headers: headers() });
      $("#prompt").replaceChildren(renderBlocks(prompt));
      session.tools = (await apiJson(envPath("/task_tools"), { headers: headers() })).tools;
      $("#tool").replaceChildren(...session.tools.map((tool) => el("option", { value: tool.name }, tool.name)));
      showTool();
      notice("");
    } catch (error) {
      notice(error.message, true);
    } finally {
      $("#start-button").disabled = false;
    }
  }

  async function callTool(event) {
    event.preventDefault();
    if (!session) return;
    const input = {};
    try {
      for (const field of session.fields) {
        const value = field.read();
        if (value !== undefined) input[field.name] = value;
      }
    } catch (error) {
      notice(error.message, true);
      return;
    }
    const name = $("#tool").value;
    $("#call-button").disabled = true;
    notice(`Calling ${name}…`);
    let finished = false;
    try {
      const { text } = await api(envPath("/call"), {
        method: "POST",
        headers: { ...headers(), "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify({ name, input }),
      });
      const result = callResult(parseSse(text));
      // Numbered oldest first, as the episode's page numbers its steps.
      session.calls += 1;
      const item = el("li", { class: "call", "data-index": session.calls - 1 }, el("div", { class: "call-head" }, el("strong", {}, `#${session.calls} ${name}`), " ", el("span", { class: `badge ${result.ok ? "ok" : "failed"}` }, result.ok ? "ok" : result.reason || "error")));
      item.append(argumentsPart({ tool: name, arguments: input }));
      if (result.ok) {
        const output = result.output || {};
        item.append(labelled("output", renderBlocks(output.blocks), el("p", { class: "call-result" }, `reward ${fmtReward(output.reward) || "none"} · finished ${output.finished ? "yes" : "no"}`)));
        session.total += typeof output.reward === "number" ? output.reward : 0;
        $("#total").textContent = fmtReward(session.total);
        finished = Boolean(output.finished);
      } else {
        item.append(labelled("error", el("pre", { class: "error" }, String(result.error))));
        finished = result.reason === "episode_finished";
      }
      $("#results").append(item);
      item.scrollIntoView({ block: "nearest" });
      notice("");
    } catch (error) {
      notice(error.message, true);
    } finally {
      setFinished(finished);
    }
  }

  async function end() {
    if (!session) return;
    const ending = session;
    session = null;
    clearInterval(ending.ping);
    try {
      await api("/delete", { method: "POST", headers: { "X-Session-ID": ending.sid } });
      notice(`Session ${ending.sid} ended.`);
    } catch (error) {
      notice(error.message, true);
    }
    $("#session").hidden = true;
  }

  envSelect.addEventListener("change", loadSplits);
  $("#start").addEventListener("submit", start);
  $("#tool").addEventListener("change", showTool);
  $("#call").addEventListener("submit", callTool);
  $("#end").addEventListener("click", end);
  try {
    const names = await apiJson("/list_environments");
    envSelect.replaceChildren(...names.map((name) => el("option", { value: name }, name)));
    const wanted = new URLSearchParams(location.search).get("env");
    if (wanted && names.includes(wanted)) envSelect.value = wanted;
    await loadSplits();
  } catch (error) {
    notice(error.message, true);
  }
}

// The login form returns to the page that asked for the key.

function loginPage() {
  const back = location.pathname + location.search;
  if (back.startsWith("/ui") && !back.startsWith("/ui/login")) $("#login").elements.next.value = back;
}

const PAGES = { episodes: episodesPage, runs: runsPage, episode: episodePage, play: playPage, login: loginPage };

document.addEventListener("DOMContentLoaded", () => {
  const page = PAGES[document.body.dataset.page];
  if (page) page();
});
