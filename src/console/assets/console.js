// sluice console: progressive enhancement only. Every page works without this file.
// - [data-refresh="N"]: re-read the page every N seconds and swap the [data-live] regions,
//   while the tab is visible and no form field has focus.
// - [data-copy="ID"]: a button that copies the text of element ID to the clipboard.
(function () {
  "use strict";

  function swapLive() {
    var active = document.activeElement;
    if (document.hidden || (active && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName))) {
      return Promise.resolve();
    }
    return fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text) { return; }
        var fresh = new DOMParser().parseFromString(text, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (old) {
          var next = fresh.querySelector('[data-live="' + old.getAttribute("data-live") + '"]');
          if (next) { old.replaceWith(document.importNode(next, true)); }
        });
      })
      .catch(function () { /* offline for a moment: the next tick tries again */ });
  }

  function start() {
    var holder = document.querySelector("[data-refresh]");
    if (holder) {
      var seconds = Math.max(5, parseInt(holder.getAttribute("data-refresh"), 10) || 15);
      window.setInterval(swapLive, seconds * 1000);
    }
    document.querySelectorAll("[data-copy]").forEach(function (button) {
      button.hidden = false;
      button.addEventListener("click", function () {
        var source = document.getElementById(button.getAttribute("data-copy"));
        if (!source || !navigator.clipboard) { return; }
        navigator.clipboard.writeText(source.textContent.trim()).then(function () {
          button.textContent = "Copied";
        }, function () { button.textContent = "Select and copy"; });
      });
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
