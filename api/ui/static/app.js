// task-service admin UI: the little JavaScript the pages need (ADR 009).
// - every htmx request carries the CSRF token;
// - live regions ([data-live]) refresh through htmx when the event stream
//   (the session cookie authenticates it) reports a matching event, and the
//   header says whether the stream is live or the connection is lost;
// - the live events page ([data-tail]) appends events as they arrive;
// - times in the viewer's zone (the server writes UTC);
// - small helpers: select-all checkboxes, the SOP preview.
"use strict";

(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]');
  document.addEventListener("htmx:configRequest", (e) => {
    if (csrf) e.detail.headers["X-CSRF-Token"] = csrf.content;
  });

  const streamURL = "/api/v1/admin/events/stream";

  // toLogin leaves for the login page, which brings the admin back here.
  function toLogin() {
    location.href = "/login?expired=1&next=" + encodeURIComponent(location.pathname + location.search);
  }

  // The connection badge in the header (#conn) says whether a live page is
  // following the event stream: "live", or "connection lost" while the
  // stream is down and the page is not updating. The events page's own
  // status (#tail-status) follows it.
  function showConnection(state) {
    const texts = { connecting: "connecting…", live: "live", lost: "connection lost, reconnecting…", paused: "paused" };
    const badge = document.getElementById("conn");
    if (badge) {
      badge.hidden = false;
      badge.dataset.state = state;
      badge.textContent = texts[state];
      badge.title = state === "lost" ? "The server cannot be reached: this page is not updating." : "";
    }
    const status = document.getElementById("tail-status");
    if (status) status.textContent = texts[state];
  }

  // openStream follows the event stream and calls onEvent with each event.
  // EventSource reconnects by itself after a network error, sending
  // Last-Event-ID, and stops when the server refuses it (an expired login,
  // too many streams). On any error the page shows the connection as lost
  // and asks /session, a cheap request, whether the login still holds: on
  // 401 it goes to the login page; otherwise a stopped stream is reopened
  // from the last position seen. The server ends an open stream with
  // auth_expired when the login ends (expiry, deactivation, a new password,
  // a lost admin role): no reconnect can succeed then.
  function openStream(query, onEvent, onOpen, from) {
    let es = null;
    let last = from || "";
    let stopped = false;
    let checking = false;
    let retry = null;
    function connect() {
      retry = null;
      let q = query;
      if (last) q += (q ? "&" : "") + "after=" + encodeURIComponent(last);
      es = new EventSource(streamURL + (q ? "?" + q : ""));
      es.onopen = () => { showConnection("live"); if (onOpen) onOpen(); };
      es.onmessage = (m) => {
        if (m.lastEventId) last = m.lastEventId;
        let ev;
        try { ev = JSON.parse(m.data); } catch (err) { return; }
        onEvent(ev);
      };
      es.addEventListener("auth_expired", () => {
        stopped = true;
        es.close();
        toLogin();
      });
      es.onerror = () => {
        if (stopped) return;
        showConnection("lost");
        checkSession();
      };
    }
    function reopenIfClosed() {
      if (stopped || retry !== null || !es || es.readyState !== EventSource.CLOSED) return;
      retry = setTimeout(connect, 2000);
    }
    function checkSession() {
      if (checking) return;
      checking = true;
      fetch("/session", { credentials: "same-origin", cache: "no-store" }).then((r) => {
        checking = false;
        if (r.status === 401) {
          stopped = true;
          if (es) es.close();
          toLogin();
          return;
        }
        reopenIfClosed();
      }, () => { checking = false; reopenIfClosed(); });
    }
    showConnection("connecting");
    connect();
    return {
      pause() {
        stopped = true;
        if (retry !== null) { clearTimeout(retry); retry = null; }
        if (es) es.close();
        showConnection("paused");
      },
      resume() { stopped = false; showConnection("connecting"); connect(); },
    };
  }

  // Live regions: refresh at most every 500 ms, never while the user is
  // typing or selecting inside one, nor while its last refresh is still in
  // flight (an event that arrives meanwhile refreshes it once more: the
  // answer in flight may predate it). Regions are known by their id, since
  // each refresh replaces the element.
  // A click is a press and a release on the same element: a region
  // replaced between the two would swallow it, so none is replaced while a
  // pointer is down inside it (the answer is dropped and asked for again).
  let pressed = null;
  document.addEventListener("pointerdown", (e) => { pressed = e.target; }, true);
  document.addEventListener("pointerup", () => { setTimeout(() => { pressed = null; if (stale.size) refreshSoon(); }, 0); }, true);
  function busy(el) {
    if (pressed && el.contains(pressed)) return true;
    const a = document.activeElement;
    if (a && el.contains(a) && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName) && a.type !== "checkbox") return true;
    return el.querySelector("input[type=checkbox][data-select]:checked") !== null;
  }
  function watches(el, ev) {
    const types = (el.dataset.live || "").split(",").filter(Boolean);
    if (types.length && !types.some((t) => ev.type.startsWith(t))) return false;
    const ids = (el.dataset.watch || "").split(" ").filter(Boolean);
    return !ids.length || ids.includes(ev.stream_id);
  }
  const stale = new Set();
  const inflight = new Set();
  // The region may be gone from the page by the time its request ends (its
  // answer, or a filter's, replaced it), and htmx then tells nobody on the
  // page: the request itself says when it ended, whatever became of the
  // region.
  const regionOf = new WeakMap();
  document.addEventListener("htmx:beforeRequest", (e) => {
    const elt = e.detail.elt;
    if (elt && elt.dataset && elt.dataset.live !== undefined) {
      const id = elt.id;
      inflight.add(id);
      regionOf.set(e.detail.xhr, id);
      e.detail.xhr.addEventListener("loadend", () => {
        inflight.delete(id);
        if (stale.size) refreshSoon();
      });
    }
  });
  document.addEventListener("htmx:beforeSwap", (e) => {
    // A filter the list refuses answers 400 with the page, its message in
    // #live: show it (htmx leaves a 4xx answer unswapped by default).
    if (e.detail.xhr.status === 400 && e.detail.target && e.detail.target.id === "live") {
      e.detail.shouldSwap = true;
      e.detail.isError = false;
    }
    // The answer may have been asked for before the user pressed, typed or
    // checked a box in the region: drop it then, and ask again later.
    const id = regionOf.get(e.detail.xhr);
    const el = id === undefined ? null : document.getElementById(id);
    if (el && busy(el)) {
      e.detail.shouldSwap = false;
      stale.add(id);
    }
  });
  let pending = false;
  let dueAt = 0;
  function refreshSoon() {
    if (pending) return;
    pending = true;
    const wait = Math.max(0, dueAt - Date.now());
    setTimeout(() => {
      pending = false;
      let again = false;
      stale.forEach((id) => {
        const el = document.getElementById(id);
        if (!el) { stale.delete(id); return; }
        if (busy(el) || inflight.has(id)) { again = true; return; }
        stale.delete(id);
        dueAt = Date.now() + 500;
        htmx.trigger(el, "refresh");
      });
      if (again) { dueAt = Date.now() + 500; refreshSoon(); }
    }, wait);
  }
  function markAll() {
    document.querySelectorAll("[data-live]").forEach((el) => stale.add(el.id));
    refreshSoon();
  }
  function startLive() {
    if (!document.querySelector("[data-live]")) return;
    // (Re)connected: anything may have happened while we were away.
    openStream("", (ev) => {
      let hit = false;
      document.querySelectorAll("[data-live]").forEach((el) => {
        if (watches(el, ev)) { stale.add(el.id); hit = true; }
      });
      if (hit) refreshSoon();
    }, markAll);
    // Pages whose figures move without events (heartbeats) also refresh on a timer.
    document.querySelectorAll("[data-every]").forEach((el) => {
      setInterval(() => { stale.add(el.id); refreshSoon(); }, 1000 * Number(el.dataset.every));
    });
  }

  // The live events page: a table the stream appends to, newest on top.
  function startTail() {
    const tail = document.querySelector("[data-tail]");
    if (!tail) return;
    const body = tail.querySelector("tbody");
    const max = 500;
    function cell(text, cls) {
      const td = document.createElement("td");
      if (cls) td.className = cls;
      td.textContent = text;
      return td;
    }
    // An event's JSON as its row shows it, bounded as the server bounds its
    // rows: at most 16 KiB, indented only when it nests at most 64 levels
    // (indenting writes a line per level, so deep JSON would grow as the
    // square of its depth).
    function eventJSON(ev) {
      const flat = JSON.stringify(ev);
      if (flat.length > 16384) return flat.slice(0, 16384) + " … (truncated)";
      let depth = 0, deepest = 0, inString = false;
      for (let i = 0; i < flat.length; i++) {
        const c = flat[i];
        if (inString) {
          if (c === "\\") i++;
          else if (c === '"') inString = false;
        } else if (c === '"') inString = true;
        else if (c === "{" || c === "[") deepest = Math.max(deepest, ++depth);
        else if (c === "}" || c === "]") depth--;
      }
      return deepest <= 64 ? JSON.stringify(ev, null, 2) : flat;
    }
    function row(ev) {
      const tr = document.createElement("tr");
      tr.dataset.position = ev.position;
      const when = cell(ev.occurred_at.slice(11, 23), "mono when");
      when.title = ev.occurred_at;
      tr.appendChild(when);
      tr.appendChild(cell(ev.type, "mono"));
      const task = document.createElement("td");
      if (ev.stream_type === "task") {
        const a = document.createElement("a");
        a.href = "/tasks/" + ev.stream_id;
        a.textContent = ev.stream_id.slice(0, 8);
        a.className = "mono";
        task.appendChild(a);
      } else {
        task.textContent = ev.stream_type + " " + ev.stream_id.slice(0, 8);
      }
      tr.appendChild(task);
      tr.appendChild(cell(ev.actor.name || ev.actor.id || ev.actor.kind));
      const sum = document.createElement("td");
      const det = document.createElement("details");
      const s = document.createElement("summary");
      s.textContent = ev.summary;
      const pre = document.createElement("pre");
      pre.textContent = eventJSON(ev);
      det.appendChild(s);
      det.appendChild(pre);
      sum.appendChild(det);
      tr.appendChild(sum);
      return tr;
    }
    let seen = Number(tail.dataset.count || 0);
    const counter = document.getElementById("tail-count");
    const stream = openStream(tail.dataset.tail, (ev) => {
      body.insertBefore(row(ev), body.firstChild);
      while (body.rows.length > max) body.deleteRow(body.rows.length - 1);
      seen++;
      if (counter) counter.textContent = String(seen);
      const empty = document.getElementById("tail-empty");
      if (empty) empty.remove();
    }, null, tail.dataset.after);
    const toggle = document.getElementById("tail-toggle");
    if (toggle) {
      toggle.addEventListener("click", () => {
        const paused = toggle.getAttribute("aria-pressed") === "true";
        if (paused) { stream.resume(); toggle.textContent = "Pause"; }
        else { stream.pause(); toggle.textContent = "Resume"; }
        toggle.setAttribute("aria-pressed", paused ? "false" : "true");
      });
    }
  }

  // Select-all for bulk actions.
  document.addEventListener("change", (e) => {
    const t = e.target;
    if (t.matches("input[data-select-all]")) {
      document.querySelectorAll("input[data-select]").forEach((c) => { c.checked = t.checked; });
    }
  });

  // SOP preview: the text as workers will receive it.
  function startPreview() {
    document.querySelectorAll("[data-preview-of]").forEach((out) => {
      const src = document.getElementById(out.dataset.previewOf);
      if (!src) return;
      const show = () => { out.textContent = src.value; };
      src.addEventListener("input", show);
      show();
    });
  }

  // Times: the server writes UTC ("2026-11-26 15:04:05 UTC"); show the
  // viewer's local time with its zone, UTC staying in the tooltip.
  const pad = (n) => String(n).padStart(2, "0");
  const zone = (d) => {
    const part = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(d).find((p) => p.type === "timeZoneName");
    return part ? part.value : "";
  };
  function localTimes(root) {
    root.querySelectorAll("time[datetime]:not([data-local])").forEach((el) => {
      const d = new Date(el.getAttribute("datetime"));
      if (isNaN(d)) return;
      el.dataset.local = "1";
      el.textContent = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} ${zone(d)}`;
    });
  }
  document.addEventListener("htmx:afterSwap", (e) => localTimes(e.target));

  document.addEventListener("DOMContentLoaded", () => {
    localTimes(document);
    startLive();
    startTail();
    startPreview();
  });
})();
