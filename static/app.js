// Holdfast console behaviour: a few lines, no framework. Loaded with defer;
// CSP forbids inline script, so every hook is a data- attribute.
(function () {
  "use strict";
  // Forms marked data-confirm ask before submitting (terminate, reject...).
  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute && e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) { e.preventDefault(); }
  }, true);
  // htmx requests carry the session's CSRF token from the page's meta tag.
  document.addEventListener("htmx:configRequest", function (e) {
    var m = document.querySelector('meta[name="csrf-token"]');
    if (m) { e.detail.headers["X-CSRF-Token"] = m.content; }
  });
  // busy: a hold card someone is working in — it has focus, typed text or
  // an open disclosure (the edit box, the reject reason).
  function busy(card) {
    if (card.contains(document.activeElement)) { return true; }
    if (card.querySelector("details[open]")) { return true; }
    var fields = card.querySelectorAll("input[type=text], textarea");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].value !== fields[i].defaultValue) { return true; }
    }
    return false;
  }
  // The holds queue refreshes by out-of-band swaps, one card at a time. A
  // swap that would replace or remove a busy card is refused: only arrivals
  // and untouched cards change, and a comment being typed is never lost.
  document.addEventListener("htmx:oobBeforeSwap", function (e) {
    var t = e.detail && e.detail.target;
    if (t && t.matches && t.matches("article.hold") && busy(t)) {
      e.detail.shouldSwap = false;
    }
  });
})();
