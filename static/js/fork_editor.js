// The fork editor: the conversation (the JSON in #fork-messages, which is what the
// form submits) shown as one editable block per message. Every edit in a block writes
// the JSON again, so the blocks and the raw JSON are always the same conversation.
// Text is only ever set with textContent / value: edited tool results are untrusted.
(function () {
  "use strict";
  const ROLES = ["system", "developer", "user", "assistant", "tool"];
  let messages = [];

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => node.setAttribute(k, v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function textOf(content) {
    if (content === null || content === undefined) return "";
    if (typeof content === "string") return content;
    return content.map((part) => part.text || "").join("");
  }

  function field(labelText, control) {
    const label = el("label", {}, labelText + " ");
    label.appendChild(control);
    return label;
  }

  function save() {
    document.getElementById("fork-messages").value = JSON.stringify(messages, null, 2);
  }

  function textarea(value, onInput, cls) {
    const area = el("textarea", { rows: "3", spellcheck: "false", class: cls });
    area.value = value;
    area.addEventListener("input", () => { onInput(area.value); save(); });
    return area;
  }

  function input(value, onInput, cls) {
    const box = el("input", { type: "text", class: cls });
    box.value = value;
    box.addEventListener("input", () => { onInput(box.value); save(); });
    return box;
  }

  // Arguments that are not JSON are forked as typed (a model can send such; the call then
  // fails with an arguments error), but the editor says so while they are typed.
  function argumentsWarning(area) {
    const note = el("small", { class: "error arguments-warning", "aria-live": "polite" });
    function check() {
      let problem = "";
      try {
        if (area.value.trim()) JSON.parse(area.value);
      } catch (err) {
        problem = "Not valid JSON (" + err.message + "): forked as typed, this call fails " +
          "with an arguments error.";
      }
      note.textContent = problem;
      note.hidden = !problem;
      area.setAttribute("aria-invalid", problem ? "true" : "false");
    }
    area.addEventListener("input", check);
    check();
    return note;
  }

  function callBlock(message, call, position) {
    const block = el("div", { class: "fork-call", "data-call": String(position) });
    const fn = call.function || (call.function = { name: "", arguments: "{}" });
    block.appendChild(field("Call id", input(call.id || "", (v) => { call.id = v; }, "call-id")));
    block.appendChild(field("Tool name", input(fn.name || "", (v) => { fn.name = v; }, "call-name")));
    const args = textarea(fn.arguments || "", (v) => { fn.arguments = v; }, "call-arguments");
    block.appendChild(field("Arguments (JSON)", args));
    block.appendChild(argumentsWarning(args));
    const remove = el("button", { type: "button", class: "remove-call" }, "Remove this call");
    remove.addEventListener("click", () => {
      message.tool_calls.splice(position, 1);
      if (!message.tool_calls.length) delete message.tool_calls;
      save(); render();
    });
    block.appendChild(remove);
    return block;
  }

  function setRole(message, role) {
    message.role = role;
    if (role !== "assistant") delete message.tool_calls;
    if (role !== "tool") { delete message.tool_call_id; delete message.is_error; }
    if (role === "tool" && !message.tool_call_id) message.tool_call_id = "";
    if (message.content === null || message.content === undefined) message.content = "";
  }

  function messageBlock(message, index, error) {
    const block = el("div", { class: "fork-message role-" + message.role, "data-index": String(index), "data-role": message.role });
    const head = el("div", { class: "row" });
    head.appendChild(el("strong", {}, "messages[" + index + "]"));
    const role = el("select", { class: "message-role" });
    ROLES.forEach((r) => { const o = el("option", { value: r }, r); if (r === message.role) o.selected = true; role.appendChild(o); });
    role.addEventListener("change", () => { setRole(message, role.value); save(); render(); });
    head.appendChild(field("Role", role));
    const remove = el("button", { type: "button", class: "remove-message" }, "Remove");
    remove.addEventListener("click", () => { messages.splice(index, 1); save(); render(); });
    head.appendChild(remove);
    block.appendChild(head);
    if (error) block.appendChild(el("p", { class: "error", role: "alert" }, error));
    if (message.role === "tool") {
      block.appendChild(field("Answers call id", input(message.tool_call_id || "", (v) => { message.tool_call_id = v; }, "tool-call-id")));
    }
    const label = message.role === "tool" ? "Result" : "Text";
    block.appendChild(field(label, textarea(textOf(message.content), (v) => {
      message.content = (message.role === "assistant" && v === "") ? null : v;
    }, "message-content")));
    if (message.role === "tool") {
      const flag = el("input", { type: "checkbox", class: "is-error" });
      flag.checked = message.is_error === true;
      flag.addEventListener("change", () => {
        if (flag.checked) message.is_error = true; else delete message.is_error;
        save();
      });
      const flagLabel = el("label", { class: "check" });
      flagLabel.appendChild(flag);
      flagLabel.appendChild(document.createTextNode(" is error"));
      block.appendChild(flagLabel);
    }
    if (message.role === "assistant") {
      (message.tool_calls || []).forEach((call, position) => block.appendChild(callBlock(message, call, position)));
      const add = el("button", { type: "button", class: "add-call" }, "Add a tool call");
      add.addEventListener("click", () => {
        message.tool_calls = message.tool_calls || [];
        message.tool_calls.push({ id: "call_" + Date.now().toString(36), type: "function", function: { name: "", arguments: "{}" } });
        save(); render();
      });
      block.appendChild(add);
    }
    return block;
  }

  // The server's error for one message ("messages[3]: ...") goes into that block.
  function errorFor(index) {
    const box = document.getElementById("fork-error");
    if (!box) return null;
    const at = /^messages\[(\d+)\]/.exec(box.dataset.field || "");
    return at && Number(at[1]) === index ? box.textContent.trim() : null;
  }

  function render() {
    const blocks = document.getElementById("fork-blocks");
    blocks.replaceChildren(...messages.map((m, i) => messageBlock(m, i, errorFor(i))));
  }

  function showRaw(raw) {
    document.getElementById("fork-raw").hidden = !raw;
    document.getElementById("fork-blocks").hidden = raw;
    document.getElementById("fork-add-row").hidden = raw;
    document.getElementById("fork-raw-toggle").checked = raw;
  }

  // Blocks from the JSON; false (raw JSON stays shown) when it is not a list of objects.
  function load() {
    try {
      const parsed = JSON.parse(document.getElementById("fork-messages").value);
      if (!Array.isArray(parsed) || !parsed.every((m) => m && typeof m === "object" && !Array.isArray(m))) return false;
      messages = parsed;
    } catch (e) {
      return false;
    }
    render();
    return true;
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (!document.getElementById("fork-editor-form")) return;
    const toggle = document.getElementById("fork-raw-toggle");
    showRaw(!load());
    toggle.addEventListener("change", () => {
      if (toggle.checked) { showRaw(true); return; }
      if (load()) { showRaw(false); return; }
      showRaw(true);
      window.alert("The JSON is not a list of message objects: fix it before leaving raw mode.");
    });
    document.getElementById("fork-add-message").addEventListener("click", () => {
      messages.push({ role: "user", content: "" });
      save(); render();
    });
  });
})();
