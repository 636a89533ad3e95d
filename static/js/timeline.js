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

  // Appending a block whose id already exists replaces that block instead.
  document.addEventListener("htmx:oobBeforeSwap", function (evt) {
    var fragment = evt.detail.fragment;
    if (!fragment || !fragment.children) { return; }
    Array.prototype.slice.call(fragment.children).forEach(function (child) {
      if (!child.id || !child.hasAttribute("data-upsert")) { return; }
      var existing = document.getElementById(child.id);
      if (existing) {
        existing.replaceWith(child);
        if (window.htmx) { window.htmx.process(child); }
      }
    });
  });

  document.addEventListener("htmx:wsOpen", function (evt) {
    evt.detail.socketWrapper.send(JSON.stringify({ type: "resume", after: lastSeq() }));
  });

  // The ws extension only reconnects after abnormal closes; reconnect after any close
  // that is not a deliberate refusal (4xxx) while the run is still going.
  document.addEventListener("htmx:wsClose", function (evt) {
    var code = evt.detail.event.code;
    var handledByExtension = [1006, 1011, 1012, 1013].indexOf(code) >= 0;
    if (code >= 4000 && code < 5000) {
      var root = timeline();
      if (root) { root.dataset.socket = "refused"; }
      return;
    }
    if (!handledByExtension && !isTerminal()) {
      setTimeout(function () { evt.detail.socketWrapper.reconnect(); }, 500);
    }
  });

  document.addEventListener("htmx:wsAfterMessage", function () {
    var root = timeline();
    if (root) { root.dataset.seq = String(lastSeq()); }
  });
})();
