// mcpmux operator page: the item filter and the live figures from
// /ui/events. Everything received is written with textContent, never as HTML.
"use strict";
(function () {
  var HISTORY = 120;
  var history = new Map();

  function $(selector, root) { return (root || document).querySelector(selector); }
  function all(selector, root) { return Array.prototype.slice.call((root || document).querySelectorAll(selector)); }
  function set(el, value) { if (el && el.textContent !== String(value)) { el.textContent = String(value); } }
  function ms(v) { return v == null ? "–" : (v < 10 ? v.toFixed(1) : Math.round(v)) + " ms"; }
  function pct(v) { return v == null ? "–" : (100 * v).toFixed(1) + "%"; }

  // The filter: hides items that do not match, opens lists that do.
  var filter = $("#item-filter");
  if (filter) {
    filter.addEventListener("input", function () {
      var q = filter.value.trim().toLowerCase();
      all("details.items").forEach(function (details) {
        var shown = 0;
        all("li", details).forEach(function (li) {
          var match = !q || li.textContent.toLowerCase().indexOf(q) >= 0;
          li.hidden = !match;
          if (match) { shown++; }
        });
        details.hidden = q !== "" && shown === 0;
        details.open = q !== "" && shown > 0;
      });
      all("#item-rows tr").forEach(function (tr) {
        tr.hidden = q !== "" && (tr.dataset.item || "").toLowerCase().indexOf(q) < 0;
      });
    });
  }

  function chart(key, value) {
    var points = history.get(key) || [];
    points.push(value);
    if (points.length > HISTORY) { points.shift(); }
    history.set(key, points);
    all("svg.spark").forEach(function (svg) {
      if (svg.getAttribute("data-chart") !== key) { return; }
      var max = Math.max.apply(null, points.concat([1]));
      var step = 120 / (HISTORY - 1);
      var offset = 120 - step * (points.length - 1);
      var line = points.map(function (p, i) {
        return (offset + i * step).toFixed(1) + "," + (29 - 28 * p / max).toFixed(1);
      }).join(" ");
      svg.querySelector("polyline").setAttribute("points", line);
    });
  }

  function itemRow(item) {
    var key = item.upstream + " " + item.item;
    var row = all("#item-rows tr").filter(function (tr) { return tr.dataset.key === key; })[0];
    if (row) { return row; }
    row = document.createElement("tr");
    row.dataset.key = key;
    row.dataset.item = item.item;
    var upstream = document.createElement("td");
    upstream.textContent = item.upstream;
    var name = document.createElement("th");
    name.scope = "row";
    name.textContent = item.item;
    row.append(upstream, name);
    ["calls", "rate", "errors", "p50", "p99"].forEach(function (field) {
      var td = document.createElement("td");
      td.dataset.field = field;
      row.append(td);
    });
    var cell = document.createElement("td");
    var svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("data-chart", key);
    svg.setAttribute("viewBox", "0 0 120 30");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "calls per second");
    svg.append(document.createElementNS("http://www.w3.org/2000/svg", "polyline"));
    cell.append(svg);
    row.append(cell);
    $("#item-rows").append(row);
    return row;
  }

  function update(figures) {
    figures.upstreams.forEach(function (u) {
      var card = all("article.upstream").filter(function (a) { return a.dataset.upstream === u.name; })[0];
      if (!card) { return; }
      card.dataset.state = u.state;
      var state = $("[data-field=state]", card);
      set(state, u.state);
      state.className = "state state-" + u.state;
      var reason = $("[data-field=reason]", card);
      set(reason, u.reason || "");
      reason.hidden = !u.reason;
      set($("[data-field=restarts]", card), u.restarts);
      set($("[data-field=pid]", card), u.pid == null ? "–" : u.pid);
      set($("[data-field=uptime]", card), u.uptime || "–");
      set($("[data-field=rate]", card), u.rate);
      set($("[data-field=latency]", card), ms(u.p50) + " / " + ms(u.p99));
      chart(u.name, u.rate);
      chart("~p99 " + u.name, u.p99 || 0);
    });
    figures.items.forEach(function (item) {
      var row = itemRow(item);
      set($("[data-field=calls]", row), item.calls);
      set($("[data-field=rate]", row), item.rate);
      set($("[data-field=errors]", row), pct(item.errorRate));
      set($("[data-field=p50]", row), ms(item.p50));
      set($("[data-field=p99]", row), ms(item.p99));
      chart(row.dataset.key, item.rate);
    });
    set($("#total-calls"), figures.calls);
    set($("#total-errors"), figures.errors);
    set($("#total-rate"), figures.rate);
    set($("#total-error-rate"), pct(figures.errorRate));
    chart("", figures.rate);
    chart("~errors", 100 * (figures.errorRate || 0));
    set($("#live-status"), "Live updates: " + figures.sessions + " sessions, " +
      figures.listenStreams + " listen streams, " + figures.subscribedUris +
      " subscribed URIs; updated " + new Date().toLocaleTimeString());
  }

  if (window.EventSource) {
    var source = new EventSource("ui/events");
    source.addEventListener("figures", function (e) { update(JSON.parse(e.data)); });
    source.onerror = function () { set($("#live-status"), "Live updates: reconnecting…"); };
  } else {
    set($("#live-status"), "Live updates need EventSource; reload the page to refresh.");
  }
})();
