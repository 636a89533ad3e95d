// Ticking rows to compare (the runs list and the calls list: form.compare-ticks, a plain
// GET form to /runs/compare that works without this script, where the server refuses
// anything but two runs). Here the Compare button is enabled only at exactly two ticks,
// and the hint beside it says how many are ticked. The forms come and go with htmx swaps
// (a filter change replaces the results), so everything listens on the document.
(function () {
  "use strict";

  function update(form) {
    var ticked = form.querySelectorAll("input[name=run]:checked").length;
    var button = form.querySelector("button.compare-button");
    var hint = form.querySelector(".compare-hint");
    if (button) { button.disabled = ticked !== 2; }
    if (hint) {
      hint.textContent = ticked === 2 ? "2 ticked: ready to compare."
        : ticked === 0 ? "Tick two rows to compare their runs."
        : ticked === 1 ? "1 ticked: tick one more."
        : ticked + " ticked: untick " + (ticked - 2) + " to compare two.";
    }
  }

  function updateAll(root) {
    var forms = (root || document).querySelectorAll("form.compare-ticks");
    for (var i = 0; i < forms.length; i++) { update(forms[i]); }
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target && target.name === "run" && target.form && target.form.classList.contains("compare-ticks")) {
      update(target.form);
    }
  });
  // A live row swapped in keeps its tick (hx-preserve), a filtered list starts a new form.
  document.addEventListener("htmx:afterSettle", function () { updateAll(); });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { updateAll(); });
  } else {
    updateAll();
  }
}());
