/* Draw the plotly figures the server built.
 *
 * A chart is an element `<div class="chart" data-figure="ID">` next to
 * `{{ figure|json_script:"ID" }}`: the JSON is plotly's own `fig.to_json()`, so the
 * server decides everything about the figure and this file only draws it. Charts inside
 * htmx-swapped fragments are (re)drawn after each swap.
 */
(function () {
  "use strict";

  var CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  function draw(el) {
    var source = document.getElementById(el.dataset.figure);
    if (!source || typeof Plotly === "undefined") { return; }
    var fig;
    try { fig = JSON.parse(source.textContent); } catch (e) { return; }
    if (!fig || !fig.data || fig.data.length === 0) {
      el.innerHTML = '<div class="chart-empty"></div>';
      el.firstChild.textContent = el.dataset.empty || "No data for this chart yet.";
      return;
    }
    Plotly.react(el, fig.data, fig.layout || {}, CONFIG);
    el.dataset.drawn = "1";
  }

  function drawAll(root) {
    (root || document).querySelectorAll(".chart[data-figure]").forEach(draw);
  }

  document.addEventListener("DOMContentLoaded", function () { drawAll(document); });
  document.addEventListener("htmx:afterSettle", function (evt) { drawAll(evt.target); });
  // Out-of-band swaps (a polled result) insert charts without a settle event on them: draw any chart
  // that appears in the page.
  new MutationObserver(function (records) {
    records.forEach(function (record) {
      record.addedNodes.forEach(function (node) {
        if (node.nodeType !== 1) { return; }
        if (node.matches(".chart[data-figure]")) { draw(node); }
        node.querySelectorAll(".chart[data-figure]").forEach(draw);
      });
    });
  }).observe(document.documentElement, { childList: true, subtree: true });
})();
