// cutover console: the only script. Regions marked data-refresh="URL" reload their
// server-rendered HTML every data-every seconds (paused while the tab is hidden); a 401
// means the session ended, and the page says so. No framework, no build step.
"use strict";

function refresh(region) {
  const every = Math.max(2, Number(region.dataset.every || 5)) * 1000;
  let timer = null;
  async function tick() {
    if (document.hidden) { timer = setTimeout(tick, every); return; }
    try {
      const response = await fetch(region.dataset.refresh, {
        credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" },
      });
      if (response.status === 401) {
        document.getElementById("signed-out").hidden = false;
        return;  // stop: signing in again is a person's decision
      }
      if (response.ok) {
        region.innerHTML = await response.text();  // the gateway's own escaped template
        region.classList.remove("stale");
      } else {
        region.classList.add("stale");
      }
    } catch (_) {
      region.classList.add("stale");  // the gateway is away: keep the last figures
    }
    timer = setTimeout(tick, every);
  }
  timer = setTimeout(tick, every);
  return () => clearTimeout(timer);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-refresh]").forEach(refresh);
});
