// appliance view: draws the embedded data. Every piece of stored text goes into text nodes.
"use strict";

const DATA = JSON.parse(document.getElementById("view-data").textContent);
const LABEL_STORE = "appliance-labels:" + DATA.runs.map((r) => r.run_id).join("+");

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmt(value, digits = 2) {
  return value === null || value === undefined ? "-" : Number(value).toFixed(digits);
}

function interval(ci) {
  return ci ? `[${fmt(ci[0])}, ${fmt(ci[1])}]` : "";
}

function plot(container, figure) {
  const div = el("div", { class: "plot" });
  container.append(div);
  Plotly.newPlot(div, figure.data, figure.layout, { displaylogo: false, responsive: true, displayModeBar: "hover" });
  return div;
}

function section(id, title) {
  const node = el("section", { id }, el("h2", {}, title));
  document.querySelector("main").append(node);
  return node;
}

function runsSection() {
  const node = section("runs", "Runs");
  const table = el("table", {}, el("tr", {}, ...["run", "started", "status", "seed", "families", "players",
    "panel (judges)", "episodes"].map((h) => el("th", {}, h))));
  for (const run of DATA.runs) {
    const episodes = Object.entries(run.episodes).map(([k, v]) => `${v} ${k}`).join(", ");
    table.append(el("tr", {}, el("td", {}, run.run_id), el("td", {}, run.started_at), el("td", {}, run.status),
      el("td", { class: "num" }, run.seed), el("td", {}, run.scenarios.join(", ")), el("td", {}, run.players.join(", ")),
      el("td", {}, `${run.panel} (${run.judges.join(", ")})`), el("td", {}, episodes)));
  }
  node.append(table);
}

function boardsSection() {
  const node = section("leaderboards", "Leaderboards");
  if (!DATA.boards.length) node.append(el("p", { class: "note" }, "No family in these runs."));
  for (const board of DATA.boards) {
    const part = el("div", { class: "board" }, el("h3", {}, `${board.scenario} (run ${board.run_id})`));
    node.append(part); // in the document before plotting, so each plot takes its cell's width
    for (const metric of board.metrics) {
      const table = el("table", {}, el("tr", {}, el("th", {}, metric.metric), el("th", {}, "value"),
        el("th", {}, "95% interval"), el("th", {}, "n")));
      for (const row of metric.rows) {
        table.append(el("tr", {}, el("td", {}, row.label), el("td", { class: "num" }, fmt(row.value, 3)),
          el("td", { class: "num" }, interval(row.ci)), el("td", { class: "num" }, row.n)));
      }
      part.append(table, el("div", { class: "note" }, metric.description));
      for (const line of metric.evidence) part.append(el("div", { class: "note evidence" }, line));
    }
    const plots = el("div", { class: "plots" });
    part.append(plots);
    board.figures.forEach((figure) => plot(plots, figure));
    part.append(el("details", {}, el("summary", {}, "The family's report"), el("pre", { class: "report" }, board.report_text)));
  }
}

function comparisonSection() {
  if (!DATA.comparison && !DATA.comparison_note) return;
  const node = section("comparison", "Comparison");
  if (!DATA.comparison) {
    node.append(el("p", { class: "note" }, `No comparison: ${DATA.comparison_note}`));
    return;
  }
  const { summary } = DATA.comparison;
  node.append(el("p", {}, `Candidate ${summary.candidate_run} against base ${summary.base_run}; paired over shared instances: bootstrap intervals, sign-flip p-values adjusted by Holm across the metrics (family-wise alpha ${summary.alpha}).`));
  if (summary.differences.length) {
    node.append(el("p", { class: "note" }, `The runs differ: ${summary.differences.join("; ")}.`));
  }
  const table = el("table", {}, el("tr", {}, ...["metric", "players", "base", "candidate", "difference", "95% interval",
    "p (Holm)", "pairs", "verdict"].map((h) => el("th", {}, h))));
  for (const m of summary.metrics) {
    const players = m.base_player === m.candidate_player ? m.base_player : `${m.base_player} -> ${m.candidate_player}`;
    table.append(el("tr", {}, el("td", {}, `${m.family}.${m.metric}`), el("td", {}, players),
      el("td", { class: "num" }, fmt(m.base, 3)), el("td", { class: "num" }, fmt(m.candidate, 3)),
      el("td", { class: "num" }, fmt(m.delta, 3)), el("td", { class: "num" }, interval(m.ci)),
      el("td", { class: "num" }, fmt(m.p_regression_holm, 3)), el("td", { class: "num" }, m.pairs),
      el("td", m.regression ? { class: "regression" } : {}, m.regression ? "REGRESSION" : m.verdict)));
  }
  node.append(table);
  const plots = el("div", { class: "plots" });
  node.append(plots);
  DATA.comparison.figures.forEach((figure) => plot(plots, figure));
}

function showPlayerTranscripts(player) {
  const filter = document.getElementById("filter-player");
  if (![...filter.options].some((option) => option.value === player)) {
    document.getElementById("filter-count").textContent = `no transcript of ${player} in this page`;
    return;
  }
  filter.value = player;
  filter.dispatchEvent(new Event("input"));
  document.getElementById("transcripts").scrollIntoView();
}

function sweepsSection() {
  if (!DATA.sweeps.length && !DATA.sweep_notes.length) return;
  const node = section("sweeps", "Sweeps");
  node.append(el("p", { class: "note" }, "Each checkpoint against its base on the instances both played: 95% intervals, "
    + "and verdicts with Holm's adjustment across all checkpoints and metrics of the sweep. Click a point for that checkpoint's transcripts."));
  for (const note of DATA.sweep_notes) node.append(el("p", { class: "note" }, note));
  for (const sweep of DATA.sweeps) {
    const part = el("div", { class: "board sweep", "data-sweep": sweep.name },
      el("h3", {}, `${sweep.name} over ${sweep.base} (run ${sweep.run_id})`));
    node.append(part);
    const plots = el("div", { class: "plots" });
    part.append(plots);
    for (const curve of sweep.curves) {
      const div = plot(plots, curve.figure);
      div.on("plotly_click", (event) => {
        const player = event.points.map((point) => point.customdata).find((value) => typeof value === "string");
        if (player) showPlayerTranscripts(player);
      });
    }
    for (const curve of sweep.curves) {
      const table = el("table", {}, el("tr", {}, ...sweep.columns.map((h) => el("th", {}, h))));
      for (const row of curve.rows) {
        const verdict = row[row.length - 1];
        table.append(el("tr", {}, ...row.map((cell, index) => el("td",
          index === row.length - 1 && verdict === "REGRESSION" ? { class: "regression" } : index >= 1 && index < row.length - 1 ? { class: "num" } : {},
          cell))));
      }
      part.append(el("h4", {}, curve.metric), table);
    }
    part.append(...sweep.summary.map((line) => el("p", {}, line)));
  }
}

function calibrationSection() {
  const node = section("calibrations", "Calibrations");
  if (!DATA.calibrations.length) {
    node.append(el("p", { class: "note" }, "No calibration in this store: the scores are the judges' raw scale."));
    return;
  }
  for (const calibration of DATA.calibrations) {
    const used = calibration.used_by.length ? `maps the scores of ${calibration.used_by.join(", ")}` : "not used by these runs";
    node.append(el("h3", {}, `${calibration.calibration_id}: ${calibration.label_set} / ${calibration.criterion}`),
      el("p", { class: "note" }, `template ${calibration.template}; ${used}`));
    const plots = el("div", { class: "plots" });
    node.append(plots);
    calibration.figures.forEach((figure) => plot(plots, figure));
  }
}

// ---- transcripts and labelling -------------------------------------------------------------

function loadLabels() {
  try {
    return JSON.parse(localStorage.getItem(LABEL_STORE) || "{}");
  } catch (error) {
    return {};
  }
}

const LABELS = loadLabels();

function saveLabels() {
  try {
    localStorage.setItem(LABEL_STORE, JSON.stringify(LABELS));
  } catch (error) {
    // a file:// page may have no storage; the ratings stay in memory until exported
  }
  document.getElementById("rated-count").textContent = String(Object.keys(LABELS).length);
}

function verdictChip(verdict) {
  const text = `${verdict.judge}: ${verdict.criterion} = ${verdict.parsed ? fmt(verdict.score) : "unparsed"}`;
  return el("span", { class: verdict.parsed ? "verdict" : "verdict unparsed", title: verdict.template }, text);
}

function rawTexts(verdicts) {
  const seen = new Map();
  for (const v of verdicts) seen.set(`${v.judge}\u0000${v.raw_text}`, v);
  return [...seen.values()].map((v) => el("details", { class: "raw" }, el("summary", {}, `${v.judge} wrote (${v.template})`),
    el("pre", {}, v.raw_text)));
}

function dialogueText(transcript) {
  return transcript.messages.map((m) => `${m.speaker}: ${m.text}`).join("\n\n");
}

function rateForm(transcript, card) {
  const form = el("div", { class: "rate" }, el("div", {}, "Your rating:"));
  const saved = LABELS[transcript.episode_id] || {};
  for (const criterion of transcript.criteria) {
    const row = el("div", { class: "criterion" }, el("span", {}, `${criterion.name} `));
    for (let value = criterion.low; value <= criterion.high; value++) {
      const input = el("input", { type: "radio", name: `${transcript.episode_id}::${criterion.name}`, value: String(value),
        "data-criterion": criterion.name });
      if (saved[criterion.name] === value) input.checked = true;
      input.addEventListener("change", () => {
        LABELS[transcript.episode_id] = { ...(LABELS[transcript.episode_id] || {}), [criterion.name]: value };
        card.classList.add("rated");
        saveLabels();
      });
      row.append(el("label", {}, input, String(value)));
    }
    form.append(row);
  }
  if (Object.keys(saved).length) card.classList.add("rated");
  return form;
}

function transcriptCard(transcript) {
  const scores = Object.entries(transcript.scores).map(([k, v]) => `${k} ${fmt(v)}`).join(", ");
  const card = el("details", { class: "transcript", "data-episode": transcript.episode_id },
    el("summary", {}, `${transcript.scenario} · ${transcript.instance_id} · ${transcript.player}`,
      transcript.status === "finished" ? "" : ` (${transcript.status})`, scores ? ` · ${scores}` : ""));
  for (const message of transcript.messages) {
    const cut = message.finish_reason === "length" ? " (cut at the token cap)" : "";
    card.append(el("div", { class: "message" }, el("div", { class: "speaker" }, `${message.speaker} (${message.model})${cut}`),
      el("div", { class: "text" }, message.text), el("div", {}, message.verdicts.map(verdictChip)), rawTexts(message.verdicts)));
  }
  if (transcript.episode_verdicts.length) {
    card.append(el("div", {}, el("strong", {}, "Verdicts on the episode: "), transcript.episode_verdicts.map(verdictChip)),
      rawTexts(transcript.episode_verdicts));
  }
  card.append(rateForm(transcript, card));
  return card;
}

function exportLabels() {
  const annotator = document.getElementById("annotator").value.trim() || "browser";
  const byId = new Map(DATA.transcripts.map((t) => [t.episode_id, t]));
  const lines = [];
  for (const [episodeId, ratings] of Object.entries(LABELS)) {
    const transcript = byId.get(episodeId);
    if (!transcript) continue;
    lines.push(JSON.stringify({
      item_id: episodeId,
      texts: { dialogue: dialogueText(transcript) },
      labels: Object.entries(ratings).map(([criterion, value]) => ({ annotator, criterion, value })),
      metadata: { run_id: transcript.run_id, scenario: transcript.scenario, instance_id: transcript.instance_id,
        player: transcript.player },
    }));
  }
  const blob = new Blob([lines.join("\n") + (lines.length ? "\n" : "")], { type: "application/x-ndjson" });
  const link = el("a", { href: URL.createObjectURL(blob), download: `labels-${DATA.runs[0].run_id}.jsonl` });
  document.body.append(link);
  link.click();
  link.remove();
  document.getElementById("export-status").textContent = `exported ${lines.length} rated transcripts`;
}

function transcriptsSection() {
  const node = section("transcripts", "Transcripts");
  const shown = DATA.transcripts.length;
  node.append(el("p", { class: "note" }, shown < DATA.transcripts_total
    ? `Showing the first ${shown} of ${DATA.transcripts_total} episodes (raise --max-transcripts for more).`
    : `${shown} episodes.`));
  const players = [...new Set(DATA.transcripts.map((t) => t.player))].sort();
  const metrics = [...new Set(DATA.transcripts.flatMap((t) => Object.keys(t.scores)))].sort();
  const player = el("select", { id: "filter-player" }, el("option", { value: "" }, "all models"),
    players.map((p) => el("option", { value: p }, p)));
  const instance = el("input", { id: "filter-instance", type: "search", placeholder: "instance contains" });
  const metric = el("select", { id: "filter-metric" }, el("option", { value: "" }, "any score"),
    metrics.map((m) => el("option", { value: m }, m)));
  const low = el("input", { id: "filter-min", type: "number", step: "any", placeholder: "min", size: "5" });
  const high = el("input", { id: "filter-max", type: "number", step: "any", placeholder: "max", size: "5" });
  const count = el("span", { id: "filter-count" });
  node.append(el("div", { class: "filters" }, "Model ", player, "Instance ", instance, "Score ", metric, low, "to", high, count));
  node.append(el("div", { class: "labelbar" }, "Rate transcripts below (the export button stays in the bar at the top). Annotator ",
    el("input", { id: "annotator", value: "browser", size: "12" }),
    el("span", { class: "note" }, "Import the file with: appliance labels import FILE --format jsonl --kind dialogue --name NAME")));
  const list = el("div", { id: "transcript-list" });
  node.append(list);
  const cards = DATA.transcripts.map((t) => [t, transcriptCard(t)]);
  cards.forEach(([, card]) => list.append(card));
  function apply() {
    let visible = 0;
    for (const [t, card] of cards) {
      let keep = (!player.value || t.player === player.value) && t.instance_id.includes(instance.value);
      if (keep && metric.value) {
        const value = t.scores[metric.value];
        keep = value !== undefined && value !== null
          && (low.value === "" || value >= Number(low.value)) && (high.value === "" || value <= Number(high.value));
      }
      card.style.display = keep ? "" : "none";
      visible += keep ? 1 : 0;
    }
    count.textContent = `${visible} shown`;
  }
  [player, instance, metric, low, high].forEach((input) => input.addEventListener("input", apply));
  apply();
  saveLabels();
}

document.getElementById("app").append(
  el("header", {}, el("h1", {}, DATA.title), el("div", { class: "sub" }, `generated ${DATA.generated_at} by appliance view`)),
  el("nav", {}, ...[["runs", "Runs"], ["leaderboards", "Leaderboards"], ["sweeps", "Sweeps"], ["comparison", "Comparison"],
    ["calibrations", "Calibrations"], ["transcripts", "Transcripts"]].map(([id, name]) => el("a", { href: `#${id}` }, name)),
    el("span", { class: "labels" }, "rated: ", el("span", { id: "rated-count" }, "0"), " ",
      el("button", { id: "export-labels", onclick: exportLabels }, "Export labels (JSONL)"), " ", el("span", { id: "export-status" }))),
  el("main", {}));
runsSection();
boardsSection();
sweepsSection();
comparisonSection();
calibrationSection();
transcriptsSection();
document.body.setAttribute("data-ready", "true");
