// The playground: say when the chosen endpoint is scripted (it ignores the message), and
// keep the form's draft across a capability probe (the probe posts a form of its own,
// then comes back here). No inline scripts: the page's CSP forbids them.
(function () {
  "use strict";

  var DRAFT_KEY = "agentforge:playground-draft";

  function form() { return document.getElementById("playground-form"); }

  function showScriptedNote() {
    var note = document.getElementById("scripted-note");
    var select = document.querySelector("#playground-form select[name=endpoint]");
    if (!note || !select) { return; }
    var scripted = (note.dataset.scripted || "").split(" ");
    note.hidden = scripted.indexOf(select.value) < 0;
  }

  function saveDraft() {
    var fields = {};
    Array.prototype.forEach.call(form().elements, function (el) {
      if (!el.name || el.name === "csrfmiddlewaretoken") { return; }
      fields[el.name] = fields[el.name] || [];
    });
    new FormData(form()).forEach(function (value, name) {
      if (name in fields) { fields[name].push(String(value)); }
    });
    sessionStorage.setItem(DRAFT_KEY, JSON.stringify(fields));
  }

  function restoreDraft() {
    var saved = sessionStorage.getItem(DRAFT_KEY);
    if (!saved) { return; }
    sessionStorage.removeItem(DRAFT_KEY);  // once: a later visit shows the remembered run
    var fields = JSON.parse(saved);
    Array.prototype.forEach.call(form().elements, function (el) {
      if (!el.name || !(el.name in fields)) { return; }
      var values = fields[el.name];
      if (el.type === "checkbox" || el.type === "radio") {
        el.checked = values.indexOf(el.value) >= 0;
      } else {
        el.value = values.length ? values[0] : "";
      }
      el.dispatchEvent(new Event("change", { bubbles: true }));
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (!form()) { return; }
    restoreDraft();
    showScriptedNote();
    form().addEventListener("change", showScriptedNote);
    document.querySelectorAll("form.probe-form").forEach(function (probe) {
      probe.addEventListener("submit", saveDraft);
    });
  });
})();
