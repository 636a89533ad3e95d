// A lane's re-executions (templates/tools_app/_reexec.html): the Re-execute button loads
// the arguments editor into its lane, and each re-execution that has not finished asks
// for itself again every second until it has. Through htmx's API, not hx-* attributes,
// so the timeline's HTML carries none (an hx-* attribute there is what the page's
// escaping tests look for). No inline scripts: the page's CSP forbids them.
(function () {
  "use strict";

  var POLL_MS = 1000;
  var inFlight = {};

  document.addEventListener("click", function (evt) {
    var button = evt.target.closest ? evt.target.closest("button.reexec-open") : null;
    if (!button || !window.htmx) { return; }
    window.htmx.ajax("GET", button.dataset.editorUrl,
                     { target: "#" + button.dataset.area, swap: "outerHTML" });
  });

  function poll() {
    if (!window.htmx) { return; }
    document.querySelectorAll("li.reexecution[data-poll-url]").forEach(function (item) {
      if (inFlight[item.id]) { return; }
      inFlight[item.id] = true;
      window.htmx.ajax("GET", item.dataset.pollUrl, { target: "#" + item.id, swap: "outerHTML" })
        .finally(function () { delete inFlight[item.id]; });
    });
  }

  setInterval(poll, POLL_MS);
})();
