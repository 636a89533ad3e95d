// "Try it" on a tool page. The server turned the tool's JSON schema into a field tree
// (#tryit-schema, json_script: tools/schema_form.py); this draws it as a form, keeps the
// form and the raw JSON editor (#tryit-json, the field that is submitted) in sync both
// ways, refills both from a recent input, checks the arguments with the server as the
// user types (check-arguments) and shows the problems at the fields they concern (by
// JSON pointer). Schema text and values only ever reach the page as
// textContent or attribute values, never as HTML. No inline scripts: the CSP forbids them.
//
// Empty fields: an empty text or number field leaves its argument out (a required one
// is then reported missing at that field); an unchecked checkbox, an empty array or
// object is false, [] or {} when the argument is required, has a default or was given
// so, and is left out otherwise. Inside arrays an empty item is "" (text) or null.
(function () {
  "use strict";

  var ABSENT = {};  // a field whose argument is left out
  var NUMBER = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/;
  var ids = 0;
  var tree = null;
  var root = null;  // the drawn form: {element, collect}
  var area, fields, note, modes;

  function make(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function childPointer(pointer, key) {
    return pointer + "/" + String(key).replace(/~/g, "~0").replace(/\//g, "~1");
  }

  function has(node, key) { return Object.prototype.hasOwnProperty.call(node, key); }

  function isObject(value) {
    return value !== null && typeof value === "object" && !Array.isArray(value);
  }

  // The value a new array item starts with.
  function fresh(node) {
    if (has(node, "default")) { return node.default; }
    if (node.kind === "object") { return {}; }
    if (node.kind === "array") { return []; }
    return undefined;
  }

  // One field: a wrapper holding the pointer, its label, help text, control and error.
  function shell(node, pointer, label, required, tag) {
    var wrap = make(tag || "div", "tf tf-" + node.kind);
    wrap.dataset.pointer = pointer;
    var id = "tf-" + (++ids);
    var title = make(tag === "fieldset" ? "legend" : "label", "tf-label");
    if (tag !== "fieldset") { title.htmlFor = id; }
    title.appendChild(make("span", "tf-name", label));
    if (required) {
      var mark = make("abbr", "tf-required", "*");
      mark.title = "required";
      title.appendChild(mark);
    }
    if (label !== null) { wrap.appendChild(title); }
    if (node.description) { wrap.appendChild(make("small", "tf-help muted", node.description)); }
    var error = make("p", "tf-error error");
    error.hidden = true;
    return { wrap: wrap, id: id, error: error };
  }

  function keeps(node, required, given) {
    return required || has(node, "default") || given;
  }

  function drawScalar(node, pointer, value, label, required, inArray) {
    var s = shell(node, pointer, label, required);
    var control;
    if (node.kind === "boolean") {
      control = make("input");
      control.type = "checkbox";
      control.checked = value === true;
      s.wrap.classList.add("tf-check");
    } else if (node.kind === "enum") {
      control = make("select");
      control.appendChild(make("option", "", "(not given)")).value = "";
      node.options.forEach(function (option) {
        var item = make("option", "", option === null ? "null" : option);
        item.value = JSON.stringify(option);
        control.appendChild(item);
      });
      control.value = value === undefined ? "" : JSON.stringify(value);
    } else {
      control = make("input");
      control.type = "text";
      if (node.kind !== "string") { control.inputMode = node.kind === "integer" ? "numeric" : "decimal"; }
      control.value = value === undefined || value === null ? "" :
        (typeof value === "string" ? value : JSON.stringify(value));
    }
    control.id = s.id;
    control.name = "tf" + pointer;  // never submitted: the form posts #tryit-json only
    control.setAttribute("form", "tryit-unsubmitted");
    s.wrap.insertBefore(control, s.wrap.querySelector(".tf-help"));
    s.wrap.appendChild(s.error);
    var given = value !== undefined;
    var wasNull = value === null;
    function collect() {
      if (node.kind === "boolean") {
        return control.checked || keeps(node, required, given) || inArray ? control.checked : ABSENT;
      }
      if (node.kind === "enum") {
        return control.value === "" ? (inArray ? null : ABSENT) : JSON.parse(control.value);
      }
      var text = control.value;
      if (text === "") {
        if (inArray) { return node.kind === "string" ? "" : null; }
        if (node.nullable && wasNull) { return null; }
        return node.kind === "string" && node.default === "" ? "" : ABSENT;
      }
      if (node.kind === "string") { return text; }
      // Not a number: sent as typed, so the schema check names the field.
      return NUMBER.test(text.trim()) ? Number(text.trim()) : text;
    }
    return { element: s.wrap, collect: collect };
  }

  function drawObject(node, pointer, value, label, required) {
    var s = shell(node, pointer, label, required, label === null ? "div" : "fieldset");
    s.wrap.appendChild(s.error);
    var given = isObject(value);
    var children = node.properties.map(function (prop) {
      var sub = given && has(value, prop.name) ? value[prop.name] : undefined;
      var child = draw(prop, childPointer(pointer, prop.name), sub, prop.name, prop.required, false);
      s.wrap.appendChild(child.element);
      return { name: prop.name, field: child };
    });
    function collect() {
      var out = {};
      children.forEach(function (child) {
        var v = child.field.collect();
        if (v !== ABSENT) { out[child.name] = v; }
      });
      if (Object.keys(out).length === 0 && label !== null && !keeps(node, required, given)) {
        return ABSENT;
      }
      return out;
    }
    return { element: s.wrap, collect: collect };
  }

  function drawArray(node, pointer, value, label, required) {
    var s = shell(node, pointer, label, required, "fieldset");
    var list = make("ol", "tf-items");
    var add = make("button", "tf-add link", "Add item");
    add.type = "button";
    s.wrap.appendChild(list);
    s.wrap.appendChild(add);
    s.wrap.appendChild(s.error);
    var given = Array.isArray(value);
    var items = [];
    function redraw(values) {
      list.textContent = "";
      items = values.map(function (itemValue, index) {
        var row = make("li", "tf-item");
        var field = draw(node.items, childPointer(pointer, index), itemValue, "Item " + (index + 1), false, true);
        var remove = make("button", "tf-remove link", "Remove");
        remove.type = "button";
        remove.setAttribute("aria-label", "Remove item " + (index + 1) + " of " + (label || "the list"));
        remove.addEventListener("click", function () {
          var kept = collectItems();
          kept.splice(index, 1);
          redraw(kept);
          changed();
        });
        row.appendChild(field.element);
        row.appendChild(remove);
        list.appendChild(row);
        return field;
      });
    }
    function collectItems() {
      return items.map(function (field) {
        var v = field.collect();
        return v === ABSENT ? null : v;
      });
    }
    add.addEventListener("click", function () {
      var values = collectItems();
      values.push(fresh(node.items));
      redraw(values);
      changed();
      var controls = list.lastChild ? list.lastChild.querySelectorAll("input, select") : [];
      if (controls.length) { controls[0].focus(); }
    });
    redraw(given ? value : []);
    function collect() {
      var out = collectItems();
      return out.length === 0 && !keeps(node, required, given) ? ABSENT : out;
    }
    return { element: s.wrap, collect: collect };
  }

  function draw(node, pointer, value, label, required, inArray) {
    if (node.kind === "object") { return drawObject(node, pointer, value, label, required); }
    if (node.kind === "array") { return drawArray(node, pointer, value, label, required); }
    return drawScalar(node, pointer, value, label, required, inArray);
  }

  // A value with its keys sorted, to compare two argument sets as JSON values.
  function canonical(value) {
    if (Array.isArray(value)) { return value.map(canonical); }
    if (isObject(value)) {
      var out = {};
      Object.keys(value).sort().forEach(function (key) { out[key] = canonical(value[key]); });
      return out;
    }
    return value;
  }

  function sameJson(a, b) { return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b)); }

  function say(text) {
    note.textContent = text || "";
    note.hidden = !text;
  }

  function setMode(mode) {
    fields.hidden = mode !== "form";
    document.getElementById("tryit-raw").hidden = mode === "form";
    modes.querySelectorAll("button.mode").forEach(function (button) {
      button.setAttribute("aria-pressed", button.dataset.mode === mode ? "true" : "false");
    });
    modes.dataset.mode = mode;
  }

  // The form drawn again from the JSON editor; false when the form cannot hold those
  // arguments exactly (invalid JSON, keys the schema does not describe, other types).
  function fromJson() {
    var value;
    try {
      value = JSON.parse(area.value);
    } catch (err) {
      return "The JSON is not valid (" + err.message + "): fix it to use the form again.";
    }
    if (!isObject(value)) { return "The arguments must be a JSON object to use the form."; }
    var drawn = draw(tree, "", value, null, true, false);
    if (!sameJson(drawn.collect(), value)) {
      return "The form cannot show these arguments exactly (values the schema does not " +
        "describe, or of another type): keep editing them as JSON.";
    }
    root = drawn;
    fields.textContent = "";
    fields.appendChild(root.element);
    return "";
  }

  // Form -> JSON, after every change in the form.
  function changed() {
    area.value = JSON.stringify(root.collect(), null, 2);
    scheduleCheck();
  }

  // JSON -> form: redrawn whenever the JSON can be shown; the Form button waits otherwise.
  function syncFromJson() {
    var problem = fromJson();
    say(problem);
    modes.querySelector('button[data-mode="form"]').disabled = !!problem;
    return !problem;
  }

  // Problems at the fields: those of the last submit, except that a field the user has
  // edited since shows what the latest check as they type says about it.
  var submitted = {};
  var live = {};
  var touched = {};
  var checkTimer = null;
  var checkTicket = 0;

  function render() {
    fields.querySelectorAll(".tf").forEach(function (field) {
      var pointer = field.dataset.pointer;
      var message = touched[pointer] ? live[pointer] : submitted[pointer];
      var error = field.querySelector(":scope > .tf-error");
      error.textContent = message || "";
      error.hidden = !message;
      if (message) { field.setAttribute("aria-invalid", "true"); } else { field.removeAttribute("aria-invalid"); }
    });
  }

  function byPointer(problems) {
    var out = {};
    problems.forEach(function (problem) {
      out[problem.pointer] = out[problem.pointer] ? out[problem.pointer] + "; " + problem.message : problem.message;
    });
    return out;
  }

  // The JSON editor lists every problem the latest check found, as text.
  function listLive(problems) {
    var list = document.getElementById("tryit-live");
    list.textContent = "";
    problems.forEach(function (problem) {
      var item = make("li", "", (problem.pointer || "(arguments)") + ": " + problem.message);
      item.dataset.pointer = problem.pointer;
      list.appendChild(item);
    });
  }

  function check(ticket) {
    var form = document.getElementById("tryit-form");
    var csrf = form.querySelector("input[name=csrfmiddlewaretoken]");
    fetch(form.dataset.checkUrl, {
      method: "POST", body: area.value, credentials: "same-origin",
      headers: { "X-CSRFToken": csrf ? csrf.value : "", "Content-Type": "text/plain" },
    }).then(function (response) { return response.json(); }).then(function (answer) {
      if (ticket !== checkTicket) { return; }  // only the newest answer counts
      var problems = answer.problems || [];
      live = byPointer(problems);
      listLive(problems);
      render();
    }).catch(function () {
      if (ticket === checkTicket) { listLive([{ pointer: "", message: "could not check the arguments now" }]); }
    });
  }

  // Every edit makes the answers to earlier checks stale, even those on their way.
  function scheduleCheck() {
    var ticket = ++checkTicket;
    clearTimeout(checkTimer);
    checkTimer = setTimeout(function () { check(ticket); }, 250);
  }

  function showProblems(container) {
    var problems = [];
    container.querySelectorAll("li[data-pointer]").forEach(function (item) {
      problems.push({ pointer: item.dataset.pointer, message: item.textContent.replace(/^[^:]*:\s*/, "") });
    });
    submitted = byPointer(problems);
    touched = {};
    live = {};
    checkTicket += 1;  // a check still on its way predates this answer
    if (root) { render(); }
  }

  function start() {
    area = document.getElementById("tryit-json");
    fields = document.getElementById("tryit-fields");
    note = document.getElementById("tryit-sync");
    modes = document.getElementById("tryit-modes");
    if (!area) { return; }
    var data = document.getElementById("tryit-schema");
    tree = data ? JSON.parse(data.textContent) : null;
    if (tree) {
      modes.hidden = false;
      setMode(syncFromJson() ? "form" : "json");
      function edited(evt) {
        var field = evt.target.closest ? evt.target.closest(".tf") : null;
        if (field) {
          touched[field.dataset.pointer] = true;
          delete live[field.dataset.pointer];  // said of the value before this edit
        }
        changed();
        render();
      }
      fields.addEventListener("input", edited);
      fields.addEventListener("change", edited);
      // The fields belong to no form (only the JSON is posted): Enter submits as usual.
      fields.addEventListener("keydown", function (evt) {
        if (evt.key === "Enter" && evt.target.matches("input[type=text]")) {
          evt.preventDefault();
          document.getElementById("tryit-form").requestSubmit();
        }
      });

      modes.addEventListener("click", function (evt) {
        var button = evt.target.closest("button.mode");
        if (!button) { return; }
        if (button.dataset.mode === "form" && !syncFromJson()) { return; }
        setMode(button.dataset.mode);
      });
    }
    area.addEventListener("input", function () {
      if (tree) {
        syncFromJson();
        render();
      }
      scheduleCheck();
    });
    document.addEventListener("click", function (evt) {
      var button = evt.target.closest ? evt.target.closest("button.tryit-refill") : null;
      if (!button) { return; }
      area.value = button.dataset.arguments;
      checkTicket += 1;
      submitted = {};
      touched = {};
      live = {};
      listLive([]);
      if (tree) {
        setMode(syncFromJson() ? "form" : "json");
        render();
      }
      (tree && !fields.hidden ? fields : area).scrollIntoView({ block: "nearest" });
    });
    // A try refused for the tool's sake (disabled, a broken schema: 409) says why in
    // the panel too; the page's htmx config swaps only 2xx and 400 answers.
    document.body.addEventListener("htmx:beforeSwap", function (evt) {
      if (evt.detail.xhr.status === 409 && evt.detail.target.id === "tryit-result") {
        evt.detail.shouldSwap = true;
        evt.detail.isError = false;
      }
    });
    document.body.addEventListener("htmx:afterSettle", function (evt) {
      var problems = document.getElementById("tryit-problems");
      if (problems && evt.target.id === "tryit-result") { showProblems(problems); }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
