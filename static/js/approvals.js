// Editing a waiting call's arguments: each change is parsed and checked against the
// tool's schema by the server (the run's check-arguments URL) and the problems are shown
// by argument, as text only. Delegated from the document, so calls swapped in live work
// too. No inline scripts: the page's CSP forbids them.
(function () {
  "use strict";

  var timers = {};
  var latest = {};

  // The token of the form the field belongs to (its own, or the one its `form`
  // attribute names), else the page's decision form.
  function csrfToken(area) {
    var form = area.form || document.getElementById("decision-form");
    var input = form ? form.querySelector("input[name=csrfmiddlewaretoken]") : null;
    return input ? input.value : "";
  }

  function show(area, problems) {
    var list = document.getElementById(area.dataset.problems);
    if (!list) { return; }
    list.textContent = "";
    Object.keys(problems).forEach(function (where) {
      var item = document.createElement("li");
      item.dataset.argument = where;
      item.textContent = (where || "arguments") + ": " + problems[where];
      list.appendChild(item);
    });
    area.setAttribute("aria-invalid", Object.keys(problems).length ? "true" : "false");
  }

  function check(area) {
    var id = area.id;
    var ticket = (latest[id] || 0) + 1;
    latest[id] = ticket;
    try {
      JSON.parse(area.value);
    } catch (err) {
      show(area, { "": "not valid JSON: " + err.message });
      return;
    }
    fetch(area.dataset.checkUrl, {
      method: "POST", body: area.value, credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(area), "Content-Type": "text/plain" },
    }).then(function (response) { return response.json(); }).then(function (answer) {
      if (latest[id] === ticket) { show(area, answer.problems || {}); }  // only the newest
    }).catch(function () {
      if (latest[id] === ticket) { show(area, { "": "could not check the arguments now" }); }
    });
  }

  document.addEventListener("input", function (evt) {
    var area = evt.target;
    if (!area.matches || !area.matches("textarea[data-check-url]")) { return; }
    clearTimeout(timers[area.id]);
    timers[area.id] = setTimeout(function () { check(area); }, 250);
  });
})();
