// launchgate playground: fills the form from the embedded examples, posts it to /api/review and
// shows the answer. Every text from the server is written with textContent, never as markup.
"use strict";

const $ = (id) => document.getElementById(id);
let examples = { configs: [], manifests: [] };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c) node.append(c);
  return node;
}

function fillSelect(select, items, placeholder) {
  select.replaceChildren(el("option", { value: "", text: placeholder }));
  for (const item of items) select.append(el("option", { value: item.id, text: item.title }));
}

function pickConfig(id) {
  const c = examples.configs.find((e) => e.id === id);
  if (!c) return;
  $("config").value = c.text;
  $("config-format").value = c.format || "auto";
  $("wandb-variables").value = c.variables || "";
  $("wandb-queue").value = c.queue || "";
  $("wandb-entity").value = "";
  $("wandb-details").open = c.format === "wandb";
}

function pickManifest(id) {
  const m = examples.manifests.find((e) => e.id === id);
  if (!m) return;
  $("manifest").value = m.text;
  if ($("operation").value === "UPDATE") $("old-manifest").value = m.text;
}

async function loadExamples() {
  try {
    const response = await fetch("/api/examples");
    examples = await response.json();
  } catch (e) {
    showErrors({ error: "could not load the examples: " + e });
    return;
  }
  fillSelect($("config-example"), examples.configs, "(your own: paste below)");
  fillSelect($("manifest-example"), examples.manifests, "(your own: paste below)");
  $("config-example").value = "builtin";
  pickConfig("builtin");
  $("manifest-example").value = examples.manifests.length ? examples.manifests[0].id : "";
  pickManifest($("manifest-example").value);
  document.body.dataset.ready = "true";
}

function showErrors(answer) {
  const box = $("errors");
  const lines = [answer.error || "error"].concat((answer.details || []).map((d) => "  " + d));
  box.replaceChildren(el("h3", { text: "Cannot review" }), el("pre", { text: lines.join("\n") }));
  box.hidden = false;
}

function list(items, cls) {
  const ul = el("ul", { class: cls });
  for (const item of items) ul.append(el("li", { text: item }));
  return ul;
}

function verdictText(r) {
  if (r.verdict === "denied") return "Denied" + (r.deniedBy ? " (by the " + r.deniedBy + " webhook)" : "");
  if (r.verdict === "skipped") return "Skipped: " + (r.skipReason || "not judged");
  return r.patch.length ? "Allowed, with changes" : "Allowed";
}

function diffView(lines, i) {
  const pre = el("pre", { class: "diff", id: "diff-" + i, tabindex: "0", "aria-label": "Changes to the object" });
  if (!lines.some((l) => l.tag !== " ")) {
    pre.textContent = "(no changes)";
    return pre;
  }
  for (const l of lines) {
    const cls = l.tag === "+" ? "add" : l.tag === "-" ? "del" : "same";
    pre.append(el("span", { class: cls, text: l.tag + " " + l.text + "\n" }));
  }
  return pre;
}

function trailTable(trail, i) {
  const table = el("table", { class: "trail", id: "trail-" + i });
  table.append(el("caption", { text: "Decision trail: which rule said what" }));
  const head = el("tr");
  for (const h of ["Stage", "Rule", "Effect", "Says"]) head.append(el("th", { scope: "col", text: h }));
  table.append(el("thead", {}, head));
  const body = el("tbody");
  for (const t of trail) {
    const row = el("tr", { class: "effect-" + t.effect });
    for (const v of [t.stage, t.rule, t.effect, t.message]) row.append(el("td", { text: v }));
    body.append(row);
  }
  table.append(body);
  return table;
}

function showResult(r, i) {
  const box = el("article", { class: "result", id: "result-" + i, "aria-labelledby": "result-title-" + i });
  const who = [r.operation, r.queue ? "queue " + r.queue : null, r.user ? "by " + r.user : null]
    .filter(Boolean)
    .join(", ");
  box.append(el("h3", { id: "result-title-" + i, text: r.object + " (" + r.source + ")" }));
  box.append(el("p", { class: "meta", text: who }));
  box.append(el("p", { class: "verdict " + r.verdict, id: "verdict-" + i, text: verdictText(r) }));
  if (r.message) box.append(el("pre", { class: "message", id: "message-" + i, text: r.message }));
  if (r.warnings.length) {
    box.append(el("h4", { text: "Warnings (kubectl prints these)" }));
    const ul = list(r.warnings.map((w) => w.message + " [" + w.rule + "]"), "warnings");
    ul.id = "warnings-" + i;
    box.append(ul);
  }
  if (r.auditViolations.length) {
    box.append(el("h4", { text: "Audit violations (logged, not shown to the user)" }));
    box.append(list(r.auditViolations, "warnings"));
  }
  box.append(el("h4", { text: "Changes (object before and after launchgate's patch)" }));
  box.append(diffView(r.diff, i));
  const patch = el("details", { open: "" }, el("summary", { text: "JSON Patch (" + r.patch.length + " operations)" }));
  patch.append(el("pre", { class: "patch", id: "patch-" + i, text: JSON.stringify(r.patch, null, 2) }));
  box.append(patch);
  const after = el("details", {}, el("summary", { text: "Object after the patch" }));
  after.append(el("pre", { text: r.after }));
  box.append(after);
  box.append(trailTable(r.trail, i));
  return box;
}

function showConfig(c) {
  const box = $("config-summary");
  const parts = [el("h3", { text: "Config: " + c.source })];
  if (c.queues && c.queues.length) parts.push(el("p", { text: "Queues: " + c.queues.join(", ") }));
  if (c.enforces && c.enforces.length) {
    parts.push(el("p", { text: "Enforces:" }));
    parts.push(list(c.enforces, "enforces"));
  }
  for (const n of c.notes || []) parts.push(el("p", { class: "help", text: n }));
  if (c.snippet) {
    const d = el("details", {}, el("summary", { text: "Imported launchgate snippet" }));
    d.append(el("pre", { text: c.snippet }));
    parts.push(d);
  }
  box.replaceChildren(...parts);
  box.hidden = false;
}

function requestBody() {
  const text = (id) => $(id).value;
  const groups = text("groups").split(",").map((g) => g.trim()).filter(Boolean);
  return {
    config: text("config"),
    configFormat: text("config-format"),
    wandbQueue: text("wandb-queue"),
    wandbEntity: text("wandb-entity"),
    wandbVariables: text("wandb-variables"),
    manifest: text("manifest"),
    operation: text("operation"),
    oldManifest: text("operation") === "UPDATE" ? text("old-manifest") : null,
    queue: text("queue"),
    namespace: text("namespace"),
    userInfo: { username: text("username"), groups },
  };
}

async function review(event) {
  event.preventDefault();
  const results = $("results");
  results.dataset.state = "pending";
  results.setAttribute("aria-busy", "true");
  $("errors").hidden = true;
  $("config-summary").hidden = true;
  $("output").replaceChildren();
  $("placeholder").hidden = true;
  $("review").disabled = true;
  try {
    const response = await fetch("/api/review", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(requestBody()),
    });
    const answer = await response.json();
    if (!response.ok) {
      showErrors(answer);
    } else {
      showConfig(answer.config);
      $("output").replaceChildren(...answer.results.map(showResult));
    }
  } catch (e) {
    showErrors({ error: "the playground server did not answer: " + e });
  } finally {
    $("review").disabled = false;
    results.removeAttribute("aria-busy");
    results.dataset.state = "done";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("form").addEventListener("submit", review);
  $("config-example").addEventListener("change", (e) => pickConfig(e.target.value));
  $("manifest-example").addEventListener("change", (e) => pickManifest(e.target.value));
  $("operation").addEventListener("change", (e) => {
    const update = e.target.value === "UPDATE";
    $("old-manifest-row").hidden = !update;
    if (update && !$("old-manifest").value) $("old-manifest").value = $("manifest").value;
  });
  loadExamples();
});
