// Draws every chart of a page from its figure (JSON in a script tag the server rendered).
(function () {
  "use strict";
  var config = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
  document.querySelectorAll("[data-figure]").forEach(function (el) {
    var source = document.getElementById(el.getAttribute("data-figure"));
    if (!source) { return; }
    try {  // one chart that cannot be drawn leaves the others drawn
      var figure = JSON.parse(source.textContent);
      Plotly.newPlot(el, figure.data, figure.layout, config).then(function () {
        el.setAttribute("data-ready", "true");
      });
    } catch (err) {
      el.textContent = "This chart could not be drawn: " + err;
      el.setAttribute("data-ready", "error");
    }
  });
})();
