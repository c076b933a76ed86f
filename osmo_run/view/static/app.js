// osmo-run view: the page script of the server's pages and of the exported report.
// It never builds markup from run data: the server escapes what it renders, and
// everything this script writes goes through textContent or the DOM's own nodes.
"use strict";

(function () {
  const POLL_MS = 1500;

  // --- live updates (server pages): poll a small JSON state; while it differs from the
  // state the live parts were rendered at (data-shown-state), fetch those parts again
  // (server-rendered, escaped) and swap them in. Comparing with what the page shows, not
  // with the previous poll, lets a page catch up after a late answer or a failed refresh.
  function startPolling(main) {
    const stateUrl = main.dataset.stateUrl;
    async function tick() {
      try {
        const response = await fetch(stateUrl, { cache: "no-store" });
        const region = document.getElementById("live-region");
        if (response.ok && region) {
          const state = await response.text();
          if (state !== region.dataset.shownState) await refreshParts();
        }
      } catch (err) {
        // the server stopped or a refresh failed: keep the page as it is, try again later
      }
      setTimeout(tick, POLL_MS);
    }
    tick();
  }

  async function refreshParts() {
    const url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    if (document.body.dataset.page === "runs") url.pathname = "/";
    const response = await fetch(url, { cache: "no-store" });
    if (!response.ok) return;
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const id of ["run-title", "overview", "live-region", "charts-block"]) {
      const fresh = doc.getElementById(id);
      const current = document.getElementById(id);
      if (fresh && current) current.replaceWith(document.adoptNode(fresh));
    }
    document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
  }

  // --- the export: filter, sort and page the rows table in the browser.
  function startExport() {
    const form = document.getElementById("filters");
    const table = document.getElementById("rows-table");
    if (!form || !table) return;
    const body = table.tBodies[0];
    const all = Array.from(body.rows);
    const count = document.getElementById("match-count");
    const pager = document.getElementById("export-pager");
    const perPage = 100;
    let page = 0;
    let sort = { key: "line", desc: false };

    function value(row, key) {
      const text = row.dataset[key];
      if (key === "row" || key === "status" || key === "category") return text || "";
      return text === "" || text === undefined ? -Infinity : Number(text);
    }

    function matches(row, f) {
      if (f.status && row.dataset.status !== f.status) return false;
      if (f.category && row.dataset.category !== f.category) return false;
      if (f.phase && row.dataset.phase !== f.phase) return false;
      const reward = row.dataset.reward === "" ? NaN : Number(row.dataset.reward);
      if (f.rewardMin !== "" && !(reward >= Number(f.rewardMin))) return false;
      if (f.rewardMax !== "" && !(reward <= Number(f.rewardMax))) return false;
      if (f.passing && row.dataset.passing !== f.passing) return false;
      if (f.q && !(row.dataset.search || "").includes(f.q)) return false;
      return true;
    }

    function apply() {
      const data = new FormData(form);
      const f = {
        status: data.get("status"), category: data.get("category"), phase: data.get("phase"),
        passing: data.get("passing"), rewardMin: data.get("reward_min"), rewardMax: data.get("reward_max"),
        q: String(data.get("q") || "").trim().toLowerCase(),
      };
      const shown = all.filter((row) => matches(row, f));
      shown.sort((a, b) => {
        const x = value(a, sort.key), y = value(b, sort.key);
        const order = x < y ? -1 : x > y ? 1 : value(a, "line") - value(b, "line");
        return sort.desc ? -order : order;
      });
      const pages = Math.max(1, Math.ceil(shown.length / perPage));
      page = Math.min(page, pages - 1);
      const visible = new Set(shown.slice(page * perPage, (page + 1) * perPage));
      for (const row of all) row.hidden = !visible.has(row);
      for (const row of shown) body.appendChild(row);
      count.textContent = `${shown.length.toLocaleString()} of ${all.length.toLocaleString()} rollouts` +
        ` · page ${page + 1} of ${pages}`;
      pager.replaceChildren();
      if (page > 0) pager.appendChild(button("← previous", () => { page -= 1; apply(); }));
      if (page < pages - 1) pager.appendChild(button("next →", () => { page += 1; apply(); }));
    }

    function button(text, onclick) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "secondary";
      b.textContent = text;
      b.addEventListener("click", onclick);
      return b;
    }

    form.addEventListener("input", () => { page = 0; apply(); });
    form.addEventListener("submit", (event) => { event.preventDefault(); page = 0; apply(); });
    form.addEventListener("reset", () => setTimeout(() => { page = 0; apply(); }, 0));
    for (const th of table.tHead.rows[0].cells) {
      const key = th.dataset.sort;
      if (!key) continue;
      th.style.cursor = "pointer";
      th.addEventListener("click", () => {
        // a second click flips the order; rewards start with the highest
        sort = { key, desc: sort.key === key ? !sort.desc : key === "reward" };
        apply();
      });
    }
    // chart bars link to "#rows?category=x": set the form from such a hash
    function fromHash() {
      const hash = window.location.hash;
      if (!hash.startsWith("#rows?")) return;
      const params = new URLSearchParams(hash.slice(6));
      for (const element of form.elements) {
        if (element.name) element.value = params.get(element.name) || "";
      }
      page = 0;
      apply();
    }
    window.addEventListener("hashchange", fromHash);
    fromHash();
    apply();
  }

  // --- clean URLs: a submitted filter form leaves its empty fields out of the URL.
  function cleanFormUrls() {
    for (const form of document.querySelectorAll("form.filters[method=get]")) {
      form.addEventListener("submit", () => {
        const emptied = [];
        for (const element of form.elements) {
          const isDefault = element.value === "" || (element.name === "per_page" && element.value === "50");
          if (element.name && !element.disabled && isDefault) {
            element.disabled = true; // disabled fields are not submitted
            emptied.push(element);
          }
        }
        // back to usable if the page stays (a download, or a history return)
        setTimeout(() => { for (const element of emptied) element.disabled = false; }, 0);
      });
    }
  }

  // --- keyboard: "/" search, j/k rows, Enter opens (the row's link has focus), Esc back,
  // arrows previous/next (pages of the rows list, rows on a row page).
  function click(id) {
    const link = document.getElementById(id);
    if (link) { link.click(); return true; }
    return false;
  }

  function moveRow(step) {
    const links = Array.from(document.querySelectorAll("#rows-table tbody tr:not([hidden]) a.row-link"));
    if (!links.length) return;
    const at = links.indexOf(document.activeElement);
    const next = at < 0 ? (step > 0 ? 0 : links.length - 1) : Math.min(Math.max(at + step, 0), links.length - 1);
    for (const row of document.querySelectorAll("#rows-table tr.current")) row.classList.remove("current");
    links[next].closest("tr").classList.add("current");
    links[next].focus();
  }

  function startKeys() {
    const page = document.body.dataset.page;
    document.addEventListener("keydown", (event) => {
      if (event.ctrlKey || event.metaKey || event.altKey) return;
      const target = event.target;
      const typing = target instanceof HTMLElement &&
        (target.isContentEditable || ["INPUT", "SELECT", "TEXTAREA"].includes(target.tagName));
      if (typing) {
        if (event.key === "Escape") target.blur();
        return;
      }
      let done = false;
      if (event.key === "/") {
        const search = document.querySelector("#filters input[name=q]");
        if (search) { search.focus(); search.select(); done = true; }
      } else if (page === "run" && (event.key === "j" || event.key === "k")) {
        moveRow(event.key === "j" ? 1 : -1);
        done = true;
      } else if (event.key === "ArrowRight") {
        done = click(page === "row" ? "next-row" : "next-page");
      } else if (event.key === "ArrowLeft") {
        done = click(page === "row" ? "prev-row" : "prev-page");
      } else if (event.key === "Escape" && page === "row") {
        done = click("back-link");
      }
      if (done) event.preventDefault();
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const main = document.querySelector("main");
    if (document.body.dataset.page === "export") startExport();
    else {
      cleanFormUrls();
      startKeys();
      if (main && main.dataset.poll === "1") startPolling(main);
    }
  });
})();
