// The console's own script: charts and the live-refresh guard. Pages work without it.
"use strict";

// Live regions refresh only while nobody is typing in one of their forms.
window.rflowIdle = function () {
  var active = document.activeElement;
  return !(active && active.closest && active.closest("#live form, #bars form"));
};

function rflowCharts(root) {
  if (typeof uPlot === "undefined") return;
  root.querySelectorAll(".chart[data-series]").forEach(function (box) {
    if (box.dataset.drawn) return;
    box.dataset.drawn = "1";
    JSON.parse(box.dataset.series).forEach(function (series) {
      var holder = document.createElement("div");
      holder.className = "chart-one";
      box.appendChild(holder);
      var capLine = series.times.map(function () { return series.cap; });
      new uPlot({
        title: series.label + ": used over the window (line) against the cap (dashed)",
        width: Math.max(Math.min(box.clientWidth || 700, 900), 320),
        height: 220,
        scales: { x: { time: true } },
        series: [
          {},
          { label: "used", stroke: "#2563eb", fill: "rgba(37,99,235,0.12)", paths: uPlot.paths.stepped({ align: 1 }) },
          { label: "cap", stroke: "#dc2626", dash: [6, 4] },
        ],
        axes: [{}, { size: 90 }],
      }, [series.times, series.totals, capLine], holder);
    });
  });
}

document.addEventListener("DOMContentLoaded", function () { rflowCharts(document); });
document.addEventListener("htmx:afterSettle", function (event) { rflowCharts(document); });
