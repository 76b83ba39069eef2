// Tributary dashboard: polls api/status and api/changes (relative to the base URL) and renders
// them with the DOM API only (every value is third-party text: nothing goes through innerHTML).
// The provenance form works without JavaScript (it opens the /provenance page); with it, the
// answer is shown in place.
"use strict";

(function () {
  const POLL_MS = 2000;
  const $ = (id) => document.getElementById(id);
  let firstRender = true;
  let lastChangeKey = "";

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  // A link only for http(s) URIs: an upstream's `javascript:` must never become clickable.
  function uriLink(uri, text) {
    if (/^https?:\/\//i.test(uri || "")) return el("a", { href: uri, class: "uri" }, text || uri);
    return el("span", { class: "uri" }, text || uri || "–");
  }

  function ago(iso) {
    if (!iso) return el("span", { class: "muted" }, "–");
    const t = Date.parse(iso);
    const s = Math.round((t - Date.now()) / 1000);
    const abs = Math.abs(s);
    if (abs < 1) return el("time", { datetime: iso, title: iso }, "now");
    const span = abs < 90 ? abs + " s" : abs < 5400 ? Math.round(abs / 60) + " min" : Math.round(abs / 3600) + " h";
    return el("time", { datetime: iso, title: iso }, s > 0 ? "in " + span : span + " ago");
  }

  const fmt = (n) => Number(n || 0).toLocaleString("en");

  function replaceRows(tbody, rows) {
    tbody.replaceChildren(...rows);
  }

  function renderSources(sources) {
    const rows = sources.map((s) =>
      el("tr", { "data-source": s.id },
        el("th", { scope: "row" }, el("a", { href: s.set_page }, s.id)),
        el("td", {}, el("span", { class: "state state-" + s.state }, s.state.replace("_", " ")), ...notes(s)),
        el("td", {}, ago(s.last_success)),
        el("td", {}, ago(s.next_attempt)),
        el("td", { "data-field": "push" }, s.oai ? oaiCell(s.oai) : pushCell(s.push)),
        el("td", { "data-field": "freshness" }, ago(s.last_change)),
        el("td", { class: "num", "data-field": "resources" }, fmt(s.resources)),
        el("td", { class: "num", "data-field": "changes" }, fmt(s.changes)),
        el("td", { class: "num", "data-field": "failures" }, fmt(s.failures)),
        el("td", { class: "num", "data-field": "failing" }, s.failing
          ? el("a", { href: "api/failures?source=" + encodeURIComponent(s.id) }, fmt(s.failing))
          : fmt(0)),
        el("td", { class: "err" }, s.last_error || "")));
    replaceRows($("sources-body"), rows.length ? rows : [el("tr", {}, el("td", { colspan: 11 }, "No sources configured."))]);
  }

  // What the operator must know beside the harvest state: paused, no longer configured,
  // deletions held for a decision, an origin that asked us to wait, a configured URL that moved.
  function notes(s) {
    const out = [];
    if (s.paused) out.push(el("span", { class: "note note-paused", title: "since " + s.paused }, "paused"));
    if (s.configured === false) {
      out.push(el("span", { class: "note note-removed", title: "`tributary source forget " + s.id + "` deletes its records" },
        "no longer configured"));
    }
    if (s.held_deletions) {
      out.push(el("span", { class: "note note-held", title: "since " + (s.held_since || "?") + ": `tributary deletions --source " + s.id + "`" },
        fmt(s.held_deletions) + " deletions held"));
    }
    if (s.parked) {
      out.push(el("div", { class: "note note-parked", "data-field": "parked", title: "Retry-After: nothing is sent there before then" },
        "parked until " + s.parked.until + ": " + s.parked.origin + " asked us to wait"));
    }
    for (const m of s.moved || []) {
      out.push(el("div", { class: "note note-moved", "data-field": "moved" }, m.from + " moved to ", uriLink(m.to), " — update sources.toml"));
    }
    return out;
  }

  // An OAI-PMH source is polled; what its repository's Identify said is in the cell's title.
  function oaiCell(o) {
    const title = [o.repository_name, "granularity " + o.granularity, "earliest " + o.earliest_datestamp,
      "deletedRecord " + o.deleted_record, (o.admin_emails || []).join(", ")].filter(Boolean).join(" · ");
    return el("span", { class: "push push-polling", title: title }, "OAI-PMH (" + o.deleted_record + " deletions)");
  }

  // How the source is followed: by push (a verified WebSub lease, until when, at which hub),
  // waiting for a hub's verification, or by polling (with why, when a subscription failed).
  function pushCell(p) {
    if (!p) return el("span", { class: "muted" }, "–");
    const title = [p.hub ? "hub " + p.hub : "", p.lease_expires ? "lease until " + p.lease_expires : "", p.last_error || ""]
      .filter((t) => t).join("\n");
    const label = p.mode === "subscribed" ? "push" : p.mode === "pending" ? "push pending" : "polling";
    const cell = el("span", { class: "push push-" + p.mode, title: title || null }, label);
    if (p.mode === "subscribed" && p.lease_expires) return el("span", {}, cell, " ", el("span", { class: "muted" }, "lease "), ago(p.lease_expires));
    return cell;
  }

  function renderSets(sets) {
    const rows = sets.map((s) =>
      el("tr", { "data-set": s.id },
        el("th", { scope: "row" }, el("a", { href: s.page }, s.id)),
        el("td", {}, s.sources.join(", ")),
        el("td", { class: "num" }, fmt(s.resources)),
        el("td", { class: "num" }, fmt(s.changes)),
        el("td", {}, ago(s.last_change)),
        el("td", {}, uriLink(s.capability_list, "capabilitylist.xml"), " ", uriLink(s.feed, "feed.atom")),
        el("td", { class: "num" }, s.notifications && s.notifications.subscribers !== null
          ? fmt(s.notifications.subscribers) : (s.notifications ? "external hub" : "off"))));
    replaceRows($("sets-body"), rows);
  }

  function renderChanges(changes) {
    const key = changes.length ? changes[0].source + "#" + changes[0].seq : "";
    if (key === lastChangeKey) return;
    lastChangeKey = key;
    const items = changes.map((c) =>
      el("li", { "data-seq": c.seq },
        el("time", { datetime: c.datetime }, c.datetime.replace("T", " ").replace("Z", "")), " ",
        el("strong", { class: "change-" + c.change }, c.change), " ",
        el("span", {}, c.source), " ",
        uriLink(c.uri), " ",
        el("span", { class: "muted" }, "via "), uriLink(c.origin)));
    $("changes-list").replaceChildren(...(items.length ? items : [el("li", { class: "muted" }, "No changes yet.")]));
  }

  function notice(text) {
    const n = $("notice");
    n.hidden = !text;
    n.textContent = text || "";
  }

  async function getJSON(url) {
    const r = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
    if (!r.ok) throw new Error(url + ": HTTP " + r.status);
    return r.json();
  }

  function renderStatus(status) {
    const ro = $("read-only");
    ro.hidden = !status.store_read_only;
    ro.textContent = status.store_read_only
      ? "The store is read-only: " + status.store_read_only + ". Nothing new is stored until the cause is fixed and Tributary restarted; what it holds is still served."
      : "";
    renderSources(status.sources);
    renderSets(status.sets);
    $("updated").textContent = "Updated " + new Date().toLocaleTimeString();
    if (firstRender) {
      firstRender = false;
      document.body.dataset.rendered = "1";
      performance.mark("tributary-rendered");
    }
  }

  async function refresh() {
    try {
      // Status first: the changes are a separate, slower read and must not hold the table back.
      const changes = getJSON("api/changes?limit=25");
      renderStatus(await getJSON("api/status"));
      renderChanges((await changes).changes);
      notice("");
    } catch (e) {
      notice("Cannot reach Tributary (" + e.message + "); retrying every " + POLL_MS / 1000 + " s.");
    }
  }

  function table(rows) {
    const dl = el("dl", { class: "kv" });
    for (const [k, v] of rows) dl.append(el("dt", {}, k), el("dd", {}, v === null || v === undefined ? "–" : v));
    return dl;
  }

  function renderAnswer(a) {
    const box = el("article", { class: "answer", "data-uri": a.uri },
      el("h3", {}, uriLink(a.uri)),
      table([["matched by", a.matched_by], ["source", a.source], ["sets", a.sets.join(", ")],
             ["state", a.state.status + ", " + fmt(a.state.length) + " bytes" + (a.state.type ? ", " + a.state.type : "")],
             ["sha-256", el("code", {}, a.state.sha256)], ["last change", a.state.last_change]]),
      el("h4", {}, "Via chain (where it came from)"),
      el("ol", { class: "chain" }, ...a.chain.map((c) => el("li", {}, el("strong", {}, c.role), ": ", uriLink(c.uri)))),
      el("h4", {}, "Origin (via)"),
      table([["href", uriLink(a.origin.href)], ["modified", a.origin.modified], ["hash", a.origin.hash],
             ["length", a.origin.length], ["type", a.origin.type]]));
    if (a.history && a.history.length) {
      const recent = a.history.slice(-10);
      box.append(el("h4", {}, "History in Tributary" + (a.history.length > 10 ? " (last 10)" : "")),
        el("ol", {}, ...recent.map((h) => el("li", {}, h.datetime + " " + h.change + ", " + fmt(h.length) + " bytes"))));
    }
    return box;
  }

  async function lookup(ev) {
    ev.preventDefault();
    const q = $("provenance-q").value.trim();
    const out = $("provenance-result");
    if (!q) return;
    const page = "provenance?q=" + encodeURIComponent(q);
    out.replaceChildren(el("p", { class: "muted" }, "Looking up…"));
    try {
      const r = await fetch(page, { headers: { Accept: "application/json" } });
      const body = await r.json().catch(() => ({}));
      if (!r.ok || !body.resources || !body.resources.length) {
        out.replaceChildren(el("p", { role: "alert" }, body.error || "Nothing found for " + q + " (HTTP " + r.status + ")."));
        return;
      }
      out.replaceChildren(
        el("p", {}, fmt(body.resources.length) + " resource(s) match. ", el("a", { href: page }, "Open as a page")),
        ...body.resources.map(renderAnswer));
    } catch (e) {
      out.replaceChildren(el("p", { role: "alert" }, "Lookup failed: " + e.message));
    }
  }

  // The page embeds the status it was served with: the tables render before any request.
  function renderEmbedded() {
    const block = $("status-data");
    if (!block) return;
    try {
      renderStatus(JSON.parse(block.textContent));
    } catch (e) {
      notice("The embedded status is unreadable (" + e.message + "); loading it instead.");
    }
  }

  function start() {
    $("provenance-form").addEventListener("submit", lookup);
    renderEmbedded();
    refresh();
    setInterval(() => { if (!document.hidden) refresh(); }, POLL_MS);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
