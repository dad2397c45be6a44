// The dashboard's only script: live regions and the jobs list's select-all box. Every
// page works without it; it builds no markup from data, and swaps in only what the
// server rendered (and escaped) itself.
"use strict";

// A region marked data-live="MS" is fetched again every MS milliseconds (the server
// answers a request carrying X-Awa-Live with the region alone), while the tab is shown.
function live(region) {
  const every = Number(region.dataset.live) || 3000;
  const refresh = async () => {
    if (!document.hidden) {
      try {
        const response = await fetch(window.location.href, {
          headers: { "X-Awa-Live": "1" },
          credentials: "same-origin",
          cache: "no-store",
        });
        if (response.ok) {
          region.innerHTML = await response.text();
          region.dataset.refreshed = String(Date.now());
        }
      } catch (err) {
        // The server is restarting, or the network blinked: the next round tries again.
      }
    }
    window.setTimeout(refresh, every);
  };
  window.setTimeout(refresh, every);
}

function selectAll(box) {
  box.addEventListener("change", () => {
    for (const item of document.querySelectorAll('input[type="checkbox"][name="id"]')) {
      item.checked = box.checked;
    }
  });
}

document.querySelectorAll("[data-live]").forEach(live);
const all = document.getElementById("select-all");
if (all) selectAll(all);
