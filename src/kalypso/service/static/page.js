// The jobs page: reads the /v1 API with the token the user enters (kept in this tab's
// sessionStorage). Every value from the API is shown through textContent, never as HTML.
"use strict";

(() => {
  const TOKEN_KEY = "kalypso.token";
  const FINAL = new Set(["completed", "failed", "cancelled", "expired"]);
  const FAST_MS = 1000; // while a job is unfinished
  const SLOW_MS = 5000; // otherwise, to notice new jobs
  const PAGE = 20;
  const MAX_PAGE = 100; // the API's largest page
  const RESULT_ROWS_SHOWN = 100;
  const CHART_HEIGHT = 220;

  const $ = (id) => document.getElementById(id);
  const state = {
    token: sessionStorage.getItem(TOKEN_KEY),
    limit: PAGE,
    jobs: [],
    selected: null,
    job: null,
    resultFor: null,
    chart: null,
    chartFor: null,
    capacity: 0,
    timer: null,
    running: false,
    again: false,
  };

  // The jobs table's rows by job id, updated in place so a click or focus survives a refresh.
  const jobRows = new Map();

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(path, method = "GET") {
    let response;
    try {
      response = await fetch(path, {
        method,
        cache: "no-store",
        headers: { Authorization: `Bearer ${state.token}`, Accept: "application/json" },
      });
    } catch (err) {
      throw new ApiError(0, `cannot reach the server (${err.message})`);
    }
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    if (!response.ok) {
      const message = body?.error?.message ?? `${response.status} ${response.statusText}`;
      throw new ApiError(response.status, message);
    }
    return body;
  }

  // --- small DOM helpers ----------------------------------------------------------------

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function row(cells, numeric = []) {
    const tr = document.createElement("tr");
    cells.forEach((cell, i) => {
      const td = cell instanceof Node ? el("td") : el("td", cell);
      if (cell instanceof Node) td.append(cell);
      if (numeric.includes(i)) td.className = "num";
      tr.append(td);
    });
    return tr;
  }

  function show(id, visible) {
    $(id).hidden = !visible;
  }

  function showError(message) {
    $("error").textContent = message;
    show("error", Boolean(message));
  }

  const fmtTime = (s) => (s ? new Date(s * 1000).toLocaleString() : "–");
  const fmtInt = (n) => (typeof n === "number" ? n.toLocaleString() : "–");
  const fmtRate = (r) => (typeof r === "number" ? `${(r * 100).toFixed(1)} %` : "–");
  const fmtCell = (v) => {
    if (v === null || v === undefined) return "";
    return typeof v === "object" ? JSON.stringify(v) : String(v);
  };

  // --- signing in and out -----------------------------------------------------------------

  function signedIn(yes) {
    show("token-form", !yes);
    show("sign-out", yes);
    show("jobs", yes);
    if (!yes) show("job", false);
  }

  function signOut(message) {
    clearTimeout(state.timer);
    sessionStorage.removeItem(TOKEN_KEY);
    Object.assign(state, { token: null, jobs: [], selected: null, job: null, resultFor: null });
    dropChart();
    $("jobs-body").replaceChildren();
    jobRows.clear();
    signedIn(false);
    showError(message || "");
    $("token").focus();
  }

  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token").value.trim();
    if (!token) return;
    $("token").value = "";
    state.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    showError("");
    tick();
  });

  $("sign-out").addEventListener("click", () => signOut(""));

  $("more").addEventListener("click", () => {
    state.limit = Math.min(MAX_PAGE, state.limit + PAGE);
    tick();
  });

  $("cancel").addEventListener("click", async () => {
    const id = state.selected;
    if (!id) return;
    $("cancel").disabled = true;
    try {
      await api(`/v1/jobs/${encodeURIComponent(id)}/cancel`, "POST");
    } catch (err) {
      showError(`Cancelling ${id} failed: ${err.message}`);
    }
    tick();
  });

  $("jobs-body").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-select]");
    if (!button) return;
    select(button.dataset.select);
  });

  function select(id) {
    if (id === state.selected) return;
    state.selected = id;
    state.job = null;
    state.resultFor = null;
    dropChart();
    show("result-box", false);
    tick();
  }

  // --- refreshing ----------------------------------------------------------------------

  // One refresh at a time; a request for another while one runs makes one more after it.
  async function tick() {
    if (!state.token) return;
    if (state.running) {
      state.again = true;
      return;
    }
    state.running = true;
    clearTimeout(state.timer);
    let delay = SLOW_MS;
    try {
      delay = await refresh();
    } finally {
      state.running = false;
    }
    if (!state.token) return;
    if (state.again) {
      state.again = false;
      delay = 0;
    }
    state.timer = setTimeout(tick, delay);
  }

  async function refresh() {
    try {
      const page = await api(`/v1/jobs?limit=${state.limit}`);
      state.jobs = page.data;
      signedIn(true);
      if (!state.selected && state.jobs.length) state.selected = state.jobs[0].id;
      renderJobs(page.has_more);
      if (state.selected) await refreshJob();
      showError("");
    } catch (err) {
      if (err.status === 401) {
        signOut(`The token was refused: ${err.message}.`);
        return SLOW_MS;
      }
      showError(err.message);
    }
    const unfinished = (job) => job && !FINAL.has(job.status);
    return state.jobs.some(unfinished) || unfinished(state.job) ? FAST_MS : SLOW_MS;
  }

  async function refreshJob() {
    const id = state.selected;
    let job;
    try {
      job = await api(`/v1/jobs/${encodeURIComponent(id)}`);
    } catch (err) {
      if (err.status !== 404) throw err;
      state.selected = null;
      show("job", false);
      return;
    }
    if (id !== state.selected) return;
    state.job = job;
    renderJob(job);
    if (job.result_rows !== null && FINAL.has(job.status) && state.resultFor !== id) {
      const result = await api(`/v1/jobs/${encodeURIComponent(id)}/result`);
      if (id !== state.selected) return;
      state.resultFor = id;
      renderResult(result);
    }
  }

  // --- rendering -----------------------------------------------------------------------

  function jobRow(job) {
    let cells = jobRows.get(job.id);
    if (!cells) {
      const pick = el("button", job.id, "link");
      pick.type = "button";
      pick.dataset.select = job.id;
      pick.setAttribute("aria-label", `Show job ${job.id}`);
      const status = el("span");
      status.dataset.jobId = job.id;
      cells = {
        tr: el("tr"),
        pick,
        status,
        kind: el("td"),
        created: el("td"),
        calls: el("td", null, "num"),
        rate: el("td", null, "num"),
      };
      const holding = (child) => {
        const td = el("td");
        td.append(child);
        return td;
      };
      const { kind, created, calls, rate } = cells;
      cells.tr.append(holding(pick), kind, holding(status), created, calls, rate);
      jobRows.set(job.id, cells);
    }
    const p = job.progress || {};
    const selected = job.id === state.selected;
    cells.tr.className = selected ? "selected" : "";
    cells.pick.setAttribute("aria-pressed", String(selected));
    cells.status.textContent = job.cancelling ? `${job.status} (cancel asked)` : job.status;
    cells.status.className = `status status-${job.status}`;
    cells.status.dataset.status = job.status;
    cells.kind.textContent = job.kind;
    cells.created.textContent = fmtTime(job.created_at);
    cells.calls.textContent = fmtInt(p.calls);
    cells.rate.textContent = fmtRate(p.hit_rate);
    return cells.tr;
  }

  function renderJobs(hasMore) {
    const body = $("jobs-body");
    const rows = state.jobs.map(jobRow);
    const shown = new Set(state.jobs.map((job) => job.id));
    for (const [id, cells] of jobRows) {
      if (!shown.has(id)) {
        cells.tr.remove();
        jobRows.delete(id);
      }
    }
    rows.forEach((tr, i) => {
      if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] ?? null);
    });
    show("jobs-empty", rows.length === 0);
    show("jobs-table", rows.length > 0);
    show("more", hasMore && state.limit < MAX_PAGE);
  }

  function renderJob(job) {
    show("job", true);
    $("job-id").textContent = job.id;
    const p = job.progress || {};
    const counts = job.request_counts || {};
    const items = [
      ["Status", job.cancelling ? `${job.status} (cancel asked)` : job.status],
      ["Kind", job.kind],
      ["Created", fmtTime(job.created_at)],
      [
        "Requests",
        `${fmtInt(counts.completed)} of ${fmtInt(counts.total)} done,` +
          ` ${fmtInt(counts.failed)} failed`,
      ],
      [
        "Calls",
        `${fmtInt(p.calls)} (engine ${fmtInt(p.engine_calls)},` +
          ` journal ${fmtInt(p.journal_calls)})`,
      ],
      ["Prompt tokens", fmtInt(p.prompt_tokens)],
      ["Prefill tokens", fmtInt(p.prefill_tokens)],
      ["Prefix hit rate", fmtRate(p.hit_rate)],
      ["KV blocks held", `${fmtInt(p.kv_blocks)} of ${fmtInt(p.kv_capacity_blocks)}`],
      ["Runs", fmtInt(job.runs)],
    ];
    $("job-summary").replaceChildren(
      ...items.map(([term, value]) => {
        const div = el("div");
        div.append(el("dt", term), el("dd", value));
        return div;
      }),
    );

    const unfinished = !FINAL.has(job.status);
    show("cancel", unfinished);
    $("cancel").disabled = job.cancelling || job.status === "cancelling";

    const errors = job.errors || [];
    $("job-errors").replaceChildren(
      ...errors.map((e) => el("li", e.code ? `${e.code}: ${e.message ?? ""}` : fmtCell(e))),
    );
    show("job-errors-box", errors.length > 0);

    const stages = p.stages || [];
    $("stages-body").replaceChildren(
      ...stages.map((s) =>
        row(
          [s.pipeline, s.stage, s.done, s.waiting, s.running, s.budget_blocks, s.kv_blocks].map(
            fmtInt,
          ),
          [0, 1, 2, 3, 4, 5, 6],
        ),
      ),
    );
    show("stages-empty", stages.length === 0);
    show("stages-table", stages.length > 0);

    renderChart(job);
  }

  function renderResult(result) {
    const columns = result.columns || [];
    const rows = result.rows || [];
    const shown = rows.slice(0, RESULT_ROWS_SHOWN);
    const head = document.createElement("tr");
    for (const column of columns) {
      const th = el("th", column);
      th.scope = "col";
      head.append(th);
    }
    $("result-head").replaceChildren(head);
    $("result-body").replaceChildren(...shown.map((r) => row(columns.map((c) => fmtCell(r[c])))));
    const notes = [
      rows.length > shown.length
        ? `The first ${shown.length} of ${rows.length} rows.`
        : `${rows.length} row${rows.length === 1 ? "" : "s"}.`,
    ];
    if (result.partial) notes.push(`A partial result: the job is ${result.status}.`);
    $("result-note").textContent = notes.join(" ");
    show("result-box", true);
  }

  // --- the KV chart (uPlot) ----------------------------------------------------------------

  function dropChart() {
    state.chart?.destroy();
    state.chart = null;
    state.chartFor = null;
    $("kv-chart").replaceChildren();
    $("kv-caption").textContent = "";
  }

  function chartWidth() {
    return Math.max(240, Math.min(900, $("kv-chart").clientWidth || 600));
  }

  function renderChart(job) {
    const p = job.progress || {};
    const samples = p.kv_samples || [];
    const xs = samples.map((s) => s[0]);
    const held = samples.map((s) => s[1]);
    state.capacity = p.kv_capacity_blocks || 0;
    const data = [xs, held, xs.map(() => state.capacity || null)];
    const peak = held.length ? Math.max(...held) : 0;
    const plural = samples.length === 1 ? "" : "s";
    const caption = samples.length
      ? `${samples.length} sample${plural} over ${xs[xs.length - 1]} s; peak ${fmtInt(peak)}` +
        ` of ${fmtInt(state.capacity)} blocks (dashed line: the capacity).`
      : FINAL.has(job.status)
        ? "No KV samples were taken (the job ended before the first)."
        : "No KV samples yet.";
    if (typeof window.uPlot !== "function") {
      $("kv-caption").textContent = `${caption} The chart library did not load.`;
      return;
    }
    if (!state.chart || state.chartFor !== job.id) {
      dropChart();
      state.chartFor = job.id;
      state.chart = newChart(data);
    } else {
      state.chart.setData(data);
    }
    $("kv-caption").textContent = caption;
  }

  function newChart(data) {
    return new window.uPlot(
      {
        width: chartWidth(),
        height: CHART_HEIGHT,
        scales: {
          x: { time: false },
          y: { range: (u, min, max) => [0, Math.max(state.capacity, max || 0, 1) * 1.05] },
        },
        axes: [{ label: "seconds since start" }, { label: "KV blocks" }],
        series: [
          { label: "time (s)" },
          { label: "held", stroke: "#2563eb", fill: "rgba(37, 99, 235, 0.15)", width: 2 },
          { label: "capacity", stroke: "#dc2626", dash: [6, 4], width: 1, points: { show: false } },
        ],
      },
      data,
      $("kv-chart"),
    );
  }

  window.addEventListener("resize", () => {
    state.chart?.setSize({ width: chartWidth(), height: CHART_HEIGHT });
  });

  // --- start -------------------------------------------------------------------------------

  if (state.token) {
    tick();
  } else {
    signedIn(false);
  }
})();
