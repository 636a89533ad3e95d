// "Waiting for you" in the navigation (templates/tools_app/_waiting.html): keep the count
// of runs waiting for the user's decision live by polling a small JSON answer, and, once
// the user opted in with "Notify me" (kept in localStorage), raise a desktop notification
// naming the run when one starts waiting while this tab is open. Run titles are
// untrusted: they only ever go into textContent and the notification's plain text.
// No inline scripts: the page's CSP forbids them.
(function () {
  "use strict";

  var OPT_IN_KEY = "agentforge:notify-waiting";   // localStorage: "on" once opted in
  var SEEN_KEY = "agentforge:waiting-seen";       // sessionStorage: this tab's newest seen
  var POLL_MS = 5000;
  var MAX_BACKOFF_MS = 60000;

  var link, button, seen = 0, delay = POLL_MS;

  function supported() { return "Notification" in window; }

  function optedIn() {
    try { return localStorage.getItem(OPT_IN_KEY) === "on"; } catch (e) { return false; }
  }

  function setOptIn(on) {
    try {
      if (on) { localStorage.setItem(OPT_IN_KEY, "on"); } else { localStorage.removeItem(OPT_IN_KEY); }
    } catch (e) { /* storage refused: the choice lasts for this page only */ }
  }

  function remember(since) {
    seen = since;
    try { sessionStorage.setItem(SEEN_KEY, String(since)); } catch (e) { /* this page only */ }
  }

  function showCount(count) {
    link.hidden = count < 1;
    link.dataset.count = String(count);
    link.querySelector(".count").textContent = String(count);
    link.title = count === 1 ? "1 run waits for a decision you may take"
      : count + " runs wait for a decision you may take";
  }

  function showButton() {
    if (!button || !supported()) { return; }
    button.hidden = false;
    var on = optedIn() && Notification.permission === "granted";
    button.setAttribute("aria-pressed", on ? "true" : "false");
    if (Notification.permission === "denied") {
      button.textContent = "Notifications blocked";
      button.title = "The browser blocks this site's notifications: allow them in its site settings";
    } else {
      button.textContent = on ? "Notifications on" : "Notify me";
      button.title = on ? "Click to stop the desktop notifications"
        : "A desktop notification when a run starts waiting for you while this tab is open";
    }
  }

  function toggle() {
    if (optedIn() && Notification.permission === "granted") {
      setOptIn(false);
      showButton();
      return;
    }
    var asked = Notification.requestPermission(function (answer) { done(answer); });
    if (asked && asked.then) { asked.then(done); }  // the promise form; older: the callback
    function done(answer) {
      setOptIn(answer === "granted");
      showButton();
    }
  }

  function notify(state) {
    var run = state.newest;
    if (!optedIn() || !supported() || Notification.permission !== "granted") { return; }
    var others = state.count - 1;
    var body = "It waits for " + run.waits_for + (run.owner ? " (a run of " + run.owner + ")" : "") + "." +
      (others > 0 ? " " + others + " other run" + (others === 1 ? " waits" : "s wait") + " too." : "");
    try {
      // The tag: several tabs of the app show one notification per run, not one each.
      var shown = new Notification("Waiting for you: " + (run.title || "(untitled run)"),
                                   { body: body, tag: "agentforge-waiting-" + run.id });
      shown.onclick = function () {
        window.focus();
        window.location.assign(run.url);
      };
    } catch (e) { /* a browser that allows notifications only from a service worker */ }
  }

  function update(state) {
    showCount(state.count);
    if (state.newest && state.newest.since > seen) {
      notify(state);  // a run started waiting since this tab last looked
      remember(state.newest.since);
    }
  }

  function poll() {
    fetch(link.dataset.poll, { credentials: "same-origin", cache: "no-store",
                               headers: { "Accept": "application/json" } })
      .then(function (response) {
        if (response.status === 401 || response.status === 403) { return null; }  // signed out
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (state) {
        if (state === null) { return; }  // nothing more to poll
        delay = POLL_MS;
        update(state);
        schedule();
      })
      .catch(function () {  // the server restarting, the network gone: try again, less often
        delay = Math.min(delay * 2, MAX_BACKOFF_MS);
        schedule();
      });
  }

  function schedule() { window.setTimeout(poll, delay); }

  document.addEventListener("DOMContentLoaded", function () {
    link = document.getElementById("waiting-for-you");
    button = document.getElementById("notify-me");
    if (!link) { return; }
    var rendered = Number(link.dataset.newestSince) || 0;
    var stored = null;
    try { stored = sessionStorage.getItem(SEEN_KEY); } catch (e) { stored = null; }
    // A tab's first page takes what it shows as seen; a later page of the same tab
    // catches up on a run that started waiting while it was loading.
    remember(stored === null ? rendered : Number(stored) || 0);
    if (button && supported()) {
      button.addEventListener("click", toggle);
      showButton();
    }
    if (rendered > seen) { poll(); } else { schedule(); }
  });
})();
