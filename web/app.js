// Tributary dashboard: polls a page of api/status (problem sources first, filtered by name and
// state) and api/changes, or on a source's page (#/source/ID) api/sources/ID, all relative to
// the base URL, and renders them with the DOM API only (every value is third-party text:
// nothing goes through innerHTML). The plot of changes per day is an SVG drawn here.
// The provenance form works without JavaScript (it opens the /provenance page); with it, the
// answer is shown in place.
"use strict";

(function () {
  const POLL_MS = 2000;
  const $ = (id) => document.getElementById(id);
  const SVG_NS = "http://www.w3.org/2000/svg";
  const PAGE = 50;
  let firstRender = true;
  let lastChangeKey = "";
  // What the sources table shows: a page of the ranked list, by state and name.
  const view = { offset: 0, state: "", q: "" };
  // Answers to older requests (a filter since changed) are dropped, not rendered.
  let requestNo = 0;

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
      el("tr", { "data-source": s.id, class: problemsOf(s).length ? "problem" : null },
        el("th", { scope: "row" }, el("a", { href: sourceHash(s.id) }, s.id)),
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
    const empty = view.q || view.state ? "No source matches the filter." : "No sources configured.";
    replaceRows($("sources-body"), rows.length ? rows : [el("tr", {}, el("td", { colspan: 11 }, empty))]);
  }

  const sourceHash = (id) => "#/source/" + encodeURIComponent(id);

  // The server ranks and names the problems (web/problems.rs), most serious first.
  const problemsOf = (s) => s.problems || [];

  const PROBLEM_TEXT = { failing: "failing", parked: "parked", held: "deletions held", moved: "moved",
    paused: "paused", unconfigured: "no longer configured", quiet: "quiet", never_harvested: "never harvested" };

  // What the operator must know beside the harvest state: paused, no longer configured,
  // deletions held for a decision, an origin that asked us to wait, a configured URL that moved,
  // quiet, never harvested.
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
    for (const p of problemsOf(s)) {
      if (p === "quiet") out.push(el("span", { class: "note note-quiet", title: "no change applied for 7 days or more" }, "quiet"));
      if (p === "never_harvested") out.push(el("span", { class: "note note-quiet" }, "never harvested"));
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
    renderSummary(status);
    renderSources(status.sources);
    renderPager(status);
    renderSets(status.sets);
    $("updated").textContent = "Updated " + new Date().toLocaleTimeString();
    rendered();
  }

  function rendered() {
    if (firstRender) {
      firstRender = false;
      document.body.dataset.rendered = "1";
      performance.mark("tributary-rendered");
    }
  }

  // How many sources there are and how many have each problem; the state filter offers the same.
  function renderSummary(status) {
    const counts = status.problems || {};
    const parts = Object.entries(counts).filter(([, n]) => n).map(([p, n]) => fmt(n) + " " + (PROBLEM_TEXT[p] || p));
    $("sources-summary").textContent = fmt(status.total) + " sources" + (parts.length ? " · " + parts.join(", ") : " · no problems");
    const select = $("filter-state");
    const options = [["", "all"], ["problem", "with a problem"]]
      .concat(Object.keys(counts).map((p) => [p, (PROBLEM_TEXT[p] || p) + " (" + fmt(counts[p]) + ")"]))
      .concat([["ok", "healthy"], ["idle", "idle"], ["harvesting", "harvesting"], ["backing_off", "backing off"]]);
    const key = options.map((o) => o.join("=")).join("|");
    if (select.dataset.key === key) return;
    select.dataset.key = key;
    select.replaceChildren(...options.map(([v, t]) => el("option", { value: v }, t)));
    select.value = view.state;
  }

  function renderPager(status) {
    const first = status.matched ? status.offset + 1 : 0;
    const last = Math.min(status.offset + status.sources.length, status.matched);
    $("page-info").textContent = fmt(first) + "–" + fmt(last) + " of " + fmt(status.matched) +
      (status.matched !== status.total ? " matching" : "");
    $("page-prev").disabled = status.offset === 0;
    $("page-next").disabled = last >= status.matched;
  }

  function statusURL() {
    const q = new URLSearchParams({ offset: view.offset, limit: PAGE });
    if (view.state) q.set("state", view.state);
    if (view.q) q.set("q", view.q);
    return "api/status?" + q.toString();
  }

  async function refresh() {
    const no = ++requestNo;
    try {
      const id = routeSource();
      if (id !== null) {
        const page = await getJSON("api/sources/" + encodeURIComponent(id));
        if (no === requestNo) renderSourcePage(page);
      } else {
        // Status first: the changes are a separate, slower read and must not hold the table back.
        const changes = getJSON("api/changes?limit=25");
        const status = await getJSON(statusURL());
        if (no === requestNo) renderStatus(status);
        renderChanges((await changes).changes);
      }
      notice("");
    } catch (e) {
      if (no === requestNo) notice("Cannot reach Tributary (" + e.message + "); retrying every " + POLL_MS / 1000 + " s.");
    }
  }

  // The source named by the address (#/source/ID), or null for the list.
  function routeSource() {
    const m = /^#\/source\/(.+)$/.exec(location.hash);
    if (!m) return null;
    try { return decodeURIComponent(m[1]); } catch (e) { return null; }
  }

  function route() {
    const id = routeSource();
    const onSource = id !== null;
    for (const section of ["sources", "sets", "provenance", "changes"]) $(section).hidden = onSource;
    $("source-page").hidden = !onSource;
    if (onSource) {
      $("source-h").textContent = id;
      $("source-body").replaceChildren(el("p", { class: "muted" }, "Loading…"));
      window.scrollTo(0, 0);
    }
    refresh();
  }

  function renderSourcePage(page) {
    const s = page.source;
    $("source-h").replaceChildren(s.id, " ", el("span", { class: "state state-" + s.state }, s.state.replace("_", " ")), ...notes(s));
    const facts = table([
      ["problems", problemsOf(s).map((p) => PROBLEM_TEXT[p] || p).join(", ") || "none"],
      ["last attempt", ago(s.last_attempt)], ["last success", ago(s.last_success)], ["next poll", ago(s.next_attempt)],
      ["followed by", s.oai ? oaiCell(s.oai) : pushCell(s.push)], ["last change", ago(s.last_change)],
      ["resources", fmt(s.resources)], ["changes applied", fmt(s.changes)],
      ["failures in total", fmt(s.failures)], ["attempts failed in a row", fmt(s.consecutive_failures)],
      ["last error", s.last_error ? el("span", { class: "err" }, s.last_error) : "–"],
      ["set", el("a", { href: s.set_page }, s.set_page)]]);
    $("source-body").replaceChildren(facts,
      el("h3", {}, "Changes per day, last " + page.changes_per_day.length + " days"), plot(page.changes_per_day),
      el("h3", {}, "Last passes"), passesTable(page.passes),
      el("h3", {}, "Failing resources (" + fmt(page.failures.failing) + ")"), failuresList(page.failures, s.id),
      el("h3", {}, "Held deletions (" + fmt(s.held_deletions) + ")"), heldList(page.held, s),
      ...parkedAndMoved(s));
    $("updated").textContent = "Updated " + new Date().toLocaleTimeString();
    rendered();
  }

  // One bar per day, tallest = the busiest day; each bar's title gives the date and count.
  function plot(days) {
    const W = 600, H = 140, top = 14, bottom = 18;
    const max = Math.max(1, ...days.map((d) => d.changes));
    const step = W / Math.max(1, days.length);
    const svg = svgEl("svg", { class: "plot", viewBox: "0 0 " + W + " " + (H + bottom), role: "img",
      "aria-label": "Changes per day: " + fmt(days.reduce((n, d) => n + d.changes, 0)) + " in " + days.length + " days, at most " + fmt(max) + " a day" });
    days.forEach((d, i) => {
      const h = Math.round((d.changes / max) * (H - top));
      const bar = svgEl("rect", { class: "bar", x: (i * step + 1).toFixed(1), y: H - h, width: (step - 2).toFixed(1), height: h,
        "data-day": d.day, "data-changes": d.changes });
      bar.append(svgEl("title", {}, d.day + ": " + fmt(d.changes) + " changes"));
      svg.append(bar);
    });
    svg.append(svgEl("line", { class: "axis", x1: 0, y1: H + 0.5, x2: W, y2: H + 0.5 }),
      svgEl("text", { x: 0, y: 10, class: "label" }, "max " + fmt(max)),
      svgEl("text", { x: 0, y: H + bottom - 3, class: "label" }, days.length ? days[0].day : ""),
      svgEl("text", { x: W, y: H + bottom - 3, class: "label", "text-anchor": "end" }, days.length ? days[days.length - 1].day : ""));
    return svg;
  }

  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function passesTable(passes) {
    if (!passes.length) return el("p", { class: "muted" }, "No pass recorded yet.");
    const num = (n) => el("td", { class: "num" }, fmt(n));
    const rows = passes.map((p) => el("tr", { class: p.error ? "pass-failed" : null },
      el("td", {}, ago(p.finished)), el("td", {}, duration(p.started, p.finished)),
      num(p.counts.fetched), num(p.counts.unchanged), num(p.counts.failed), num(p.counts.deleted),
      el("td", {}, p.counts.partial ? "partial" : p.error ? "failed" : "complete"),
      el("td", { class: "err" }, p.error || "")));
    return el("div", { class: "scroll" }, el("table", { id: "passes" },
      el("thead", {}, el("tr", {}, ...["Finished", "Took", "Fetched", "Unchanged", "Failed", "Deleted", "Outcome", "Error"]
        .map((h, i) => el("th", { scope: "col", class: i >= 2 && i <= 5 ? "num" : null }, h)))),
      el("tbody", {}, ...rows)));
  }

  function duration(from, to) {
    if (!from || !to) return "–";
    const s = Math.max(0, Math.round((Date.parse(to) - Date.parse(from)) / 1000));
    return s < 90 ? s + " s" : s < 5400 ? Math.round(s / 60) + " min" : Math.round(s / 3600) + " h";
  }

  function failuresList(report, id) {
    if (!report.failures.length) return el("p", { class: "muted" }, "None.");
    const more = report.failing > report.failures.length
      ? el("p", {}, el("a", { href: "api/failures?source=" + encodeURIComponent(id) }, "All " + fmt(report.failing))) : null;
    return el("div", {}, el("ul", { class: "failures" }, ...report.failures.map((f) =>
      el("li", {}, uriLink(f.upstream), " ", el("span", { class: "err" }, f.reason), " ",
        el("span", { class: "muted" }, "since " + f.first_failed)))), more);
  }

  function heldList(held, s) {
    if (!held.length) return el("p", { class: "muted" }, "None.");
    return el("div", {}, el("p", { class: "muted" }, "`tributary deletions --source " + s.id + " apply` or `keep` releases them."),
      el("ul", {}, ...held.map((h) => el("li", {}, uriLink(h.uri), " ", el("span", { class: "muted" }, "since " + h.first_seen)))));
  }

  function parkedAndMoved(s) {
    const out = [];
    if (s.parked) {
      out.push(el("h3", {}, "Parked"), el("p", {}, uriLink(s.parked.origin), " asked to wait until " + (s.parked.until || "?") + "."));
    }
    const moved = s.moved || [];
    if (moved.length) {
      out.push(el("h3", {}, "Moved"), el("ul", {}, ...moved.map((m) => el("li", {}, uriLink(m.from), " → ", uriLink(m.to), " — update sources.toml"))));
    }
    return out;
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

  function filtersChanged() {
    view.q = $("filter-q").value.trim();
    view.state = $("filter-state").value;
    view.offset = 0;
    refresh();
  }

  function start() {
    $("provenance-form").addEventListener("submit", lookup);
    let typing = null;
    $("filter-q").addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(filtersChanged, 200); });
    $("filter-state").addEventListener("change", filtersChanged);
    $("source-filter").addEventListener("submit", (ev) => { ev.preventDefault(); filtersChanged(); });
    $("page-prev").addEventListener("click", () => { view.offset = Math.max(0, view.offset - PAGE); refresh(); });
    $("page-next").addEventListener("click", () => { view.offset += PAGE; refresh(); });
    window.addEventListener("hashchange", route);
    if (routeSource() === null) renderEmbedded();
    route();
    setInterval(() => { if (!document.hidden) refresh(); }, POLL_MS);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
