// The playground: say when the chosen endpoint is scripted (it ignores the message) and
// which tools its script calls, ticking them when it is chosen; keep "Named tool" a
// list of the ticked tools; and keep the form's draft across a capability probe (the
// probe posts a form of its own, then comes back here). Names come from the page's
// JSON and labels and go into the page as text only. No inline scripts: the page's
// CSP forbids them.
(function () {
  "use strict";

  var DRAFT_KEY = "agentforge:playground-draft";
  // Tools this page ticked for the chosen scripted endpoint and nobody touched since:
  // choosing another endpoint unticks them again.
  var autoTicked = {};

  function form() { return document.getElementById("playground-form"); }
  function endpointSelect() { return document.querySelector("#playground-form select[name=endpoint]"); }
  function toolBoxes() { return document.querySelectorAll("#playground-form input[name=tools]"); }

  // Endpoint id -> the tools its script calls, [{name, id}] (id "": none to tick).
  function scriptTools() {
    var note = document.getElementById("scripted-note");
    return note && note.dataset.scriptTools ? JSON.parse(note.dataset.scriptTools) : {};
  }

  function toolName(box) {
    var code = box.closest("label") && box.closest("label").querySelector("code");
    return code ? code.textContent : box.value;
  }

  function showScriptedNote() {
    var note = document.getElementById("scripted-note");
    var select = endpointSelect();
    if (!note || !select) { return; }
    var scripted = (note.dataset.scripted || "").split(" ");
    note.hidden = scripted.indexOf(select.value) < 0;
    var calls = document.getElementById("script-calls");
    if (!calls) { return; }
    var called = scriptTools()[select.value] || [];
    calls.textContent = "";
    if (!called.length) { calls.textContent = "Its script calls no tool."; return; }
    calls.appendChild(document.createTextNode("Its script calls "));
    called.forEach(function (call, index) {
      var code = document.createElement("code");
      code.textContent = call.name;
      calls.appendChild(code);
      if (!call.id) { calls.appendChild(document.createTextNode(" (not a tool you can tick here)")); }
      if (index < called.length - 1) { calls.appendChild(document.createTextNode(", ")); }
    });
    calls.appendChild(document.createTextNode(
      ": choosing it ticks " + (called.length === 1 ? "that tool." : "those tools.")));
  }

  // The chosen endpoint's script tools ticked; those ticked for the previous one (and
  // left alone) unticked.
  function tickScriptTools() {
    var called = scriptTools()[endpointSelect().value] || [];
    var wanted = {};
    called.forEach(function (call) { if (call.id) { wanted[call.id] = true; } });
    toolBoxes().forEach(function (box) {
      if (wanted[box.value]) {
        if (!box.checked) { box.checked = true; autoTicked[box.value] = true; }
      } else if (autoTicked[box.value]) {
        box.checked = false;
        delete autoTicked[box.value];
      }
    });
  }

  // "Named tool": the ticked tools, in their order; the choice kept while still ticked.
  function syncNamedTool() {
    var select = document.querySelector("#playground-form select[name=tool_choice_name]");
    if (!select) { return; }
    // A restored draft's choice waits in data-wanted until its box is ticked again.
    var chosen = "wanted" in select.dataset ? select.dataset.wanted : select.value;
    var names = [];
    toolBoxes().forEach(function (box) { if (box.checked) { names.push(toolName(box)); } });
    if (!("placeholder" in select.dataset)) {  // the server's wording of "none yet"
      select.dataset.placeholder = select.options.length ? select.options[0].textContent : "";
    }
    var placeholder = select.dataset.placeholder;
    select.textContent = "";
    var none = document.createElement("option");
    none.value = "";
    none.textContent = names.length ? placeholder : "(tick a tool first)";
    select.appendChild(none);
    names.forEach(function (name) {
      var option = document.createElement("option");
      option.value = name;
      option.textContent = name;
      select.appendChild(option);
    });
    select.value = names.indexOf(chosen) >= 0 ? chosen : "";
    // The named tool is no longer offered: no longer forced either (a form naming no
    // tool would be refused).
    var mode = form().querySelector("select[name=tool_choice]");
    if (mode && mode.value === "named" && !select.value) { mode.value = "auto"; }
  }

  function onChange(event) {
    var target = event.target;
    if (target.name === "endpoint") {
      showScriptedNote();
      tickScriptTools();
    } else if (target.name === "tools") {
      delete autoTicked[target.value];  // the person's choice from now on
    } else if (target.name === "tool_choice_name" && target.value) {
      var mode = form().querySelector("select[name=tool_choice]");
      if (mode) { mode.value = "named"; }  // naming a tool means forcing it
    }
    syncNamedTool();
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
      } else if (el.name === "tool_choice_name") {
        el.dataset.wanted = values.length ? values[0] : "";  // its options follow the boxes
        return;
      } else {
        el.value = values.length ? values[0] : "";
      }
      el.dispatchEvent(new Event("change", { bubbles: true }));
    });
    autoTicked = {};  // the draft's ticks are the person's
    syncNamedTool();
    var named = form().querySelector("select[name=tool_choice_name]");
    if (named) { delete named.dataset.wanted; }
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (!form()) { return; }
    form().addEventListener("change", onChange);
    restoreDraft();
    showScriptedNote();
    syncNamedTool();
    document.querySelectorAll("form.probe-form").forEach(function (probe) {
      probe.addEventListener("submit", saveDraft);
    });
  });
})();
