/* Small behaviours shared by every page: collapsible queue tree rows (kept across the
 * periodic htmx refresh of the tree), confirm buttons. */
(function () {
  "use strict";

  var STORE = "kaiweb.collapsedQueues";

  function collapsedPaths() {
    try { return JSON.parse(window.sessionStorage.getItem(STORE) || "[]"); } catch (e) { return []; }
  }

  function saveCollapsed() {
    var paths = [];
    document.querySelectorAll(".qtree .toggle[aria-expanded='false']").forEach(function (b) {
      paths.push(b.closest("tr").dataset.path);
    });
    try { window.sessionStorage.setItem(STORE, JSON.stringify(paths)); } catch (e) { /* private mode */ }
  }

  // A row is hidden when any ancestor row (a path that prefixes its own) is collapsed.
  function applyCollapsed(table) {
    var closed = [];
    table.querySelectorAll("tr[data-path] .toggle").forEach(function (b) {
      if (b.getAttribute("aria-expanded") === "false") { closed.push(b.closest("tr").dataset.path); }
    });
    table.querySelectorAll("tr[data-path]").forEach(function (row) {
      var p = row.dataset.path;
      var hidden = closed.some(function (c) { return c !== p && p.indexOf(c) === 0; });
      row.classList.toggle("collapsed-hidden", hidden);
    });
  }

  function restore(root) {
    var closed = collapsedPaths();
    (root || document).querySelectorAll(".qtree").forEach(function (table) {
      table.querySelectorAll("tr[data-path] .toggle").forEach(function (b) {
        var open = closed.indexOf(b.closest("tr").dataset.path) === -1;
        b.setAttribute("aria-expanded", open ? "true" : "false");
      });
      applyCollapsed(table);
    });
  }

  document.addEventListener("DOMContentLoaded", function () { restore(document); });
  document.addEventListener("htmx:afterSettle", function (evt) { restore(evt.target); });

  document.addEventListener("click", function (evt) {
    var toggle = evt.target.closest(".qtree .toggle");
    if (toggle) {
      evt.preventDefault();
      toggle.setAttribute("aria-expanded", toggle.getAttribute("aria-expanded") === "true" ? "false" : "true");
      applyCollapsed(toggle.closest("table"));
      saveCollapsed();
      return;
    }
    var all = evt.target.closest("[data-tree-all]");
    if (all) {
      evt.preventDefault();
      var expand = all.dataset.treeAll === "expand";
      document.querySelectorAll(".qtree .toggle").forEach(function (b) {
        b.setAttribute("aria-expanded", expand ? "true" : "false");
      });
      document.querySelectorAll(".qtree").forEach(applyCollapsed);
      saveCollapsed();
      return;
    }
    var confirmBtn = evt.target.closest("[data-confirm]");
    if (confirmBtn && !window.confirm(confirmBtn.dataset.confirm)) { evt.preventDefault(); }
  });

  // The zone the browser reports, for users whose preference is "my browser's local time": kept in
  // a cookie the server reads; when it was missing or has changed, the page is drawn again once.
  (function browserZone() {
    var zone;
    try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone; } catch (e) { return; }
    if (!zone || !/^[A-Za-z0-9_+\-\/]{1,64}$/.test(zone)) { return; }  // IANA names are cookie-safe as they are
    var had = (document.cookie.match(/(?:^|; )kaiweb_browser_tz=([^;]*)/) || [])[1];
    if (had === zone) { return; }
    document.cookie = "kaiweb_browser_tz=" + zone + "; path=/; max-age=31536000; SameSite=Lax";
    // Redraw only when the cookie took: a browser that refuses cookies would otherwise reload for ever.
    var kept = (document.cookie.match(/(?:^|; )kaiweb_browser_tz=([^;]*)/) || [])[1] === zone;
    var body = document.body;
    if (kept && body && body.dataset.tzSetting === "browser" && body.dataset.tz !== zone) { window.location.reload(); }
  })();
})();
