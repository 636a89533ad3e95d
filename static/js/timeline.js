// Live run timeline: remember the last event seq, resume after it on every (re)connect,
// and make appended fragments idempotent ("upsert" by id), so a replayed or duplicate
// message never doubles a row. No inline scripts: the page's CSP forbids them.
(function () {
  "use strict";

  function timeline() { return document.getElementById("timeline"); }

  function lastSeq() {
    var marker = document.getElementById("run-seq");
    if (marker && marker.dataset.seq) { return parseInt(marker.dataset.seq, 10) || 0; }
    var root = timeline();
    return root ? parseInt(root.dataset.initialSeq || "0", 10) || 0 : 0;
  }

  function isTerminal() {
    var badge = document.querySelector("#run-header [data-status]");
    var status = badge ? badge.dataset.status : "";
    return status === "succeeded" || status === "failed" || status === "cancelled";
  }

  // Appending a block whose id already exists replaces that block instead. A round's
  // wire panel the viewer had open stays open, its bodies loaded again (the new block
  // may hold more of them: the response once it came).
  document.addEventListener("htmx:oobBeforeSwap", function (evt) {
    var fragment = evt.detail.fragment;
    if (!fragment || !fragment.children) { return; }
    Array.prototype.slice.call(fragment.children).forEach(function (child) {
      if (!child.id || !child.hasAttribute("data-upsert")) { return; }
      var existing = document.getElementById(child.id);
      if (existing) {
        var wireOpen = existing.querySelector(":scope > .model-call > details.wire[open]");
        existing.replaceWith(child);
        if (window.htmx) { window.htmx.process(child); }
        var wire = wireOpen && child.querySelector(":scope > .model-call > details.wire");
        if (wire) { wire.open = true; }  // its "toggle" loads the bodies
      }
    });
  });

  // What the viewer is told about the live connection (textContent only).
  var STATES = {
    connecting: "Live updates: connecting…",
    live: "Live updates: on",
    reconnecting: "Live updates: disconnected, reconnecting…",
    refused: "Live updates: stopped (reload the page, or log in again)",
    ended: "Run finished: no more updates of this run",
  };
  var failures = 0;

  function showState(state) {
    var root = timeline();
    if (root) { root.dataset.socket = state; }
    var banner = document.getElementById("live-state");
    if (banner) {
      banner.dataset.state = state;
      banner.textContent = STATES[state] || "";
    }
  }

  document.addEventListener("htmx:wsOpen", function (evt) {
    failures = 0;
    showState("live");
    // With the mark of the list of runs made from this one that the page shows: the
    // server sends the list again if it has changed since (live/lineage.py).
    var slot = document.getElementById("run-lineage-slot");
    var lineage = slot ? slot.dataset.mark || "" : "";
    evt.detail.socketWrapper.send(JSON.stringify({ type: "resume", after: lastSeq(), lineage: lineage }));
  });

  // The ws extension reconnects after abnormal closes (1006, 1011-1013: a server that
  // restarts) with its own growing, jittered delay; after any other close that is not a
  // deliberate refusal (4xxx but 4013, the server's "try again later" when its channel
  // layer is down) while the run goes on, reconnect here the same way: 0.5 s doubling up
  // to 15 s, with jitter.
  var TRY_AGAIN = 4013;
  document.addEventListener("htmx:wsClose", function (evt) {
    var code = evt.detail.event.code;
    var handledByExtension = [1006, 1011, 1012, 1013].indexOf(code) >= 0;
    if (code >= 4000 && code < 5000 && code !== TRY_AGAIN) {
      showState("refused");
      return;
    }
    if (isTerminal()) {
      showState("ended");
      return;
    }
    showState("reconnecting");
    if (!handledByExtension) {
      var delay = Math.min(500 * Math.pow(2, failures), 15000) * (0.5 + Math.random() / 2);
      failures += 1;
      setTimeout(function () { evt.detail.socketWrapper.reconnect(); }, delay);
    }
  });

  document.addEventListener("htmx:wsError", function () {
    if (!isTerminal()) { showState("reconnecting"); }
  });

  // A running call's elapsed time ticks on between updates: the server rendered how long
  // it had run; this adds the time since the element appeared here (the viewer's clock
  // only measures an interval, so clock skew with the server does not matter).
  function formatMs(ms) {
    if (ms >= 1000) { return (ms / 1000).toFixed(2) + " s"; }
    return ms >= 10 ? Math.round(ms) + " ms" : ms.toFixed(1) + " ms";
  }

  function tick() {
    var now = performance.now();
    document.querySelectorAll("[data-elapsed-ms]").forEach(function (el) {
      if (!el.dataset.seenAt) { el.dataset.seenAt = String(now); }
      var base = parseFloat(el.dataset.elapsedMs) || 0;
      el.textContent = formatMs(base + now - parseFloat(el.dataset.seenAt));
      el.dataset.ticking = "true";
    });
  }
  setInterval(tick, 100);

  // "Cancel requested: the run stops at its next step" holds while the run goes on; once
  // it has ended the note says how (textContent only).
  function settleTheCancelNote() {
    var badge = document.querySelector("#run-header [data-status]");
    var status = badge ? badge.dataset.status : "";
    document.querySelectorAll(".message.cancel-pending").forEach(function (note) {
      note.textContent = status === "cancelled" ? "Run cancelled."
        : "The run ended (" + status + ") before it could be cancelled.";
      note.classList.remove("cancel-pending");
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    if (isTerminal()) { settleTheCancelNote(); }
  });

  document.addEventListener("htmx:wsAfterMessage", function () {
    var root = timeline();
    if (root) { root.dataset.seq = String(lastSeq()); }
    if (isTerminal()) {
      showState("ended");
      settleTheCancelNote();
    }
  });

  // "Save as a test case": the suites' names are offered once its panel is first opened.
  document.addEventListener("toggle", function (evt) {
    var panel = evt.target;
    if (panel.id !== "save-case-action" || !panel.open) { return; }
    var names = document.getElementById("suite-names");
    if (!names || !names.dataset.src || names.dataset.loaded) { return; }
    names.dataset.loaded = "true";
    htmx.ajax("GET", names.dataset.src, {target: names, swap: "innerHTML"});
  }, true);

  // A round's wire panel whose bodies could not be loaded says so (the status code only:
  // nothing of the answer is shown) and tries again when opened again; its download
  // links stay.
  function wireNotLoaded(evt) {
    var panel = evt.detail.elt;
    if (!panel || !panel.matches || !panel.matches("details.wire")) { return; }
    var status = panel.querySelector("[data-wire-status]");
    if (!status) { return; }
    var code = evt.detail.xhr && evt.detail.xhr.status ? " (HTTP " + evt.detail.xhr.status + ")" : "";
    status.textContent = "Could not load the bodies" + code + "; open again to retry";
    status.dataset.wireStatus = "failed";
  }
  document.addEventListener("htmx:responseError", wireNotLoaded);
  document.addEventListener("htmx:sendError", wireNotLoaded);

  document.addEventListener("toggle", function (evt) {
    var panel = evt.target;
    if (!panel.matches || !panel.matches("details.wire") || !panel.open) { return; }
    var status = panel.querySelector("[data-wire-status=failed]");
    if (!status) { return; }
    status.textContent = "Loading…";
    delete status.dataset.wireStatus;
    htmx.ajax("GET", panel.getAttribute("hx-get"),
              {source: panel, target: panel.querySelector(".wire-grid"), swap: "outerHTML"});
  }, true);
})();
