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
})();
