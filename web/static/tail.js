// The live tail: server-sent events, rows built with textContent only (never HTML from the wire).
"use strict";
(function () {
  const table = document.getElementById("tail");
  const state = document.getElementById("tail-state");
  if (!table || !window.EventSource) { return; }
  const body = table.tBodies[0];
  const MAX_ROWS = 500;
  const source = new EventSource(table.dataset.stream);
  source.onopen = function () { state.textContent = "Live."; };
  source.onerror = function () { state.textContent = "Disconnected; retrying…"; };
  source.onmessage = function (event) {
    const a = JSON.parse(event.data);
    const row = body.insertRow(0);
    const when = new Date(a.at * 1000).toISOString().replace("T", " ").slice(0, 19);
    const cells = [when, a.receiver_id, a.kind, a.seq || "", a.attempt, a.status || a.error,
      Math.round(a.latency_ms) + " ms", a.control || ""];
    cells.forEach(function (text, i) {
      const cell = row.insertCell();
      if (i === 1) {
        const link = document.createElement("a");
        link.href = "/ui/receivers/" + encodeURIComponent(a.receiver_id);
        link.textContent = text;
        cell.appendChild(link);
      } else {
        cell.textContent = String(text);
      }
      if (i === 5) { cell.className = a.ok ? "ok" : "bad"; }
    });
    while (body.rows.length > MAX_ROWS) { body.deleteRow(-1); }
  };
})();
