/* Small behaviours shared by every page: collapsible queue tree rows, confirm buttons. */
(function () {
  "use strict";

  // A tree row has data-path="/root/child/" ; collapsing a row hides every row whose path starts with it.
  function setExpanded(button, expanded) {
    var row = button.closest("tr");
    var table = row.closest("table");
    var path = row.dataset.path;
    button.setAttribute("aria-expanded", expanded ? "true" : "false");
    table.querySelectorAll("tr[data-path]").forEach(function (other) {
      if (other === row || other.dataset.path.indexOf(path) !== 0) { return; }
      if (!expanded) { other.classList.add("collapsed-hidden"); return; }
      // Re-show a descendant only if none of its ancestors between here and it is collapsed.
      var hidden = false;
      table.querySelectorAll("tr[data-path] .toggle[aria-expanded='false']").forEach(function (b) {
        var p = b.closest("tr").dataset.path;
        if (p !== path && other.dataset.path.indexOf(p) === 0 && other.dataset.path !== p) { hidden = true; }
      });
      other.classList.toggle("collapsed-hidden", hidden);
    });
  }

  document.addEventListener("click", function (evt) {
    var toggle = evt.target.closest(".qtree .toggle");
    if (toggle) {
      evt.preventDefault();
      setExpanded(toggle, toggle.getAttribute("aria-expanded") !== "true");
      return;
    }
    var all = evt.target.closest("[data-tree-all]");
    if (all) {
      evt.preventDefault();
      var expand = all.dataset.treeAll === "expand";
      document.querySelectorAll(".qtree .toggle").forEach(function (b) { b.setAttribute("aria-expanded", expand ? "true" : "false"); });
      document.querySelectorAll(".qtree tr[data-path]").forEach(function (r) {
        r.classList.toggle("collapsed-hidden", !expand && r.dataset.depth !== "0");
      });
      return;
    }
    var confirmBtn = evt.target.closest("[data-confirm]");
    if (confirmBtn && !window.confirm(confirmBtn.dataset.confirm)) { evt.preventDefault(); }
  });
})();
