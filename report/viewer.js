// The replay viewer: draws each trace section of a streamalloc report from
// the data element next to it (see the report package's doc for what the
// page shows and container.go for the data's layout).
//
// One x axis per trace (its time or its event index) is shared by the
// overview, the active memory and the memory map; a pixel column covers a
// range of events. The overview draws, per column, the minimum and maximum
// of each curve over that range (block maxima make this cheap for a
// million events); the two block views are rasterized column by column
// from the set of live blocks, swept forward through the allocation and
// free events, at the column's event of most live memory, so that no
// peak falls between columns. Hover, zoom and pan redraw only what
// changed; the pointer's details come from the same sweep as the pixels,
// so what the tooltip names is what is drawn there.
"use strict";
(() => {
  const started = performance.now();
  const MARGIN = { l: 74, r: 16, t: 10, b: 26 };
  const MOMENT_HINT = "Click a chart to see the segments and their blocks at that moment (Escape clears it).";

  // ---------------------------------------------------------------- format
  const UNITS = [["TiB", 2 ** 40], ["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]];
  function fmtBytes(n) {
    for (const [u, s] of UNITS) if (n >= s) return (n / s).toFixed(n / s >= 100 ? 1 : 2) + " " + u;
    return n + " B";
  }
  const fmtInt = (n) => Math.round(n).toLocaleString("en-US");
  function fmtNs(ns, step) {
    const a = Math.abs(ns), s = step || a;
    if (s >= 1e9 || a >= 1e10) return (ns / 1e9).toFixed(digits(s / 1e9)) + " s";
    if (s >= 1e6 || a >= 1e7) return (ns / 1e6).toFixed(digits(s / 1e6)) + " ms";
    return (ns / 1e3).toFixed(digits(s / 1e3)) + " µs";
  }
  // fmtDur writes a duration with three significant digits.
  function fmtDur(ns) {
    for (const [u, d] of [["s", 1e9], ["ms", 1e6], ["µs", 1e3]]) if (ns >= d) return (ns / d).toPrecision(3) + " " + u;
    return Math.round(ns) + " ns";
  }
  // digits is the number of decimals that show a step of x.
  const digits = (x) => Math.max(0, Math.min(6, -Math.floor(Math.log10(x) + 1e-9)));
  const hex = (hi, lo) => "0x" + (hi ? hi.toString(16) + lo.toString(16).padStart(8, "0") : lo.toString(16));

  // niceStep returns a 1-2-5 step near span/count.
  function niceStep(span, count) {
    const raw = span / Math.max(1, count);
    const p = 10 ** Math.floor(Math.log10(raw));
    const f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
  }
  // byteAxis returns the top of a byte axis over [0, max] and its ticks.
  function byteAxis(max) {
    max = Math.max(max, 1);
    let unit = 1, name = "B";
    for (const [u, s] of UNITS) if (max >= s) { unit = s; name = u; break; }
    const step = niceStep((max * 1.05) / unit, 5) * unit;
    const top = Math.ceil((max * 1.05) / step) * step;
    const ticks = [];
    for (let v = 0; v <= top + step / 2; v += step) ticks.push([v, trimNum(v / unit, step / unit) + " " + name]);
    return { top, ticks };
  }
  // trimNum writes v with the decimals that show step.
  const trimNum = (v, step) => v.toFixed(step >= 1 ? 0 : Math.min(3, -Math.floor(Math.log10(step))));

  // ---------------------------------------------------------------- decode
  const ARRAYS = { u8: Uint8Array, i8: Int8Array, u16: Uint16Array, i16: Int16Array, u32: Uint32Array, i32: Int32Array, f64: Float64Array };
  async function decode(b64) {
    const bin = atob(b64.trim());
    const z = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) z[i] = bin.charCodeAt(i);
    const buf = await new Response(new Blob([z]).stream().pipeThrough(new DecompressionStream("gzip"))).arrayBuffer();
    const dv = new DataView(buf);
    if (String.fromCharCode(dv.getUint8(0), dv.getUint8(1), dv.getUint8(2), dv.getUint8(3)) !== "SAV1") throw new Error("not a viewer container");
    const n = dv.getUint32(4, true);
    const h = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n)));
    const start = (8 + n + 7) & ~7;
    const cols = {};
    for (const [name, c] of Object.entries(h.columns)) {
      const src = new ARRAYS[c.type](buf, start + c.off, c.len);
      const out = c.array === "i32" ? new Int32Array(c.len) : new Float64Array(c.len);
      if (c.delta) { let acc = 0; for (let i = 0; i < c.len; i++) { acc += src[i]; out[i] = acc; } }
      else out.set(src);
      cols[name] = out;
    }
    return { h, cols };
  }

  // ---------------------------------------------------------------- curves
  // A curve is a step function of the event index: val[i] from event
  // pos[i] on (pos null: one value per event). Block maxima and minima
  // over runs of 256 values answer range queries.
  const BLK = 256;
  class Curve {
    constructor(pos, val) {
      this.pos = pos; this.val = val;
      const nb = Math.ceil(val.length / BLK);
      this.bmax = new Float64Array(nb); this.bmin = new Float64Array(nb);
      for (let b = 0; b < nb; b++) {
        let hi = -Infinity, lo = Infinity;
        for (let i = b * BLK, e = Math.min(val.length, i + BLK); i < e; i++) { const v = val[i]; if (v > hi) hi = v; if (v < lo) lo = v; }
        this.bmax[b] = hi; this.bmin[b] = lo;
      }
    }
    // index of the value in force after event e (-1: none yet)
    idx(e) {
      if (!this.pos) return Math.min(e, this.val.length - 1);
      let lo = 0, hi = this.pos.length;
      while (lo < hi) { const m = (lo + hi) >> 1; if (this.pos[m] <= e) lo = m + 1; else hi = m; }
      return lo - 1;
    }
    at(e) { const i = this.idx(e); return i < 0 ? 0 : this.val[i]; }
    // [min, max, argmax index] over events lo..hi
    range(lo, hi, out) {
      let a = Math.max(0, this.idx(lo)), b = this.idx(hi);
      if (b < 0) { out[0] = out[1] = 0; out[2] = -1; return out; }
      let mx = -Infinity, mn = Infinity, arg = a;
      const v = this.val;
      while (a <= b && a % BLK) { if (v[a] > mx) { mx = v[a]; arg = a; } if (v[a] < mn) mn = v[a]; a++; }
      while (a + BLK - 1 <= b) {
        const k = a / BLK;
        if (this.bmax[k] > mx) { mx = this.bmax[k]; arg = -1 - k; }
        if (this.bmin[k] < mn) mn = this.bmin[k];
        a += BLK;
      }
      while (a <= b) { if (v[a] > mx) { mx = v[a]; arg = a; } if (v[a] < mn) mn = v[a]; a++; }
      if (arg < 0) { const k = -1 - arg; for (let i = k * BLK; ; i++) if (v[i] === mx) { arg = i; break; } }
      out[0] = mn; out[1] = mx; out[2] = this.pos ? this.pos[arg] : arg;
      return out;
    }
  }

  // ---------------------------------------------------------------- model
  class Model {
    constructor({ h, cols }) {
      this.h = h; this.n = h.events; this.nb = h.blocks;
      this.series = h.seriesOnly;
      const c = (k) => cols[k];
      this.streams = h.streams;
      if (this.series) {
        this.live = new Curve(c("live.ev"), c("live.val"));
      } else {
        this.time = h.timed && this.n > 1 && c("time")[this.n - 1] > 0 ? c("time") : null;
        for (const k of ["alloc", "free", "size", "stream", "fstream", "stack"]) this[k] = c(k);
        this.live = new Curve(null, this.liveOf(() => true));
        if (this.streams.length > 1 && this.streams.length <= 8)
          this.streamLive = this.streams.map((_, s) => new Curve(null, this.liveOf((i) => this.stream[i] === s)));
        // blocks by free event (counting sort), for the sweep
        const cnt = new Int32Array(this.n + 1);
        let nf = 0;
        for (let i = 0; i < this.nb; i++) if (this.free[i] >= 0) { cnt[this.free[i] + 1]++; nf++; }
        for (let e = 0; e < this.n; e++) cnt[e + 1] += cnt[e];
        this.freeOrder = new Int32Array(nf);
        for (let i = 0; i < this.nb; i++) if (this.free[i] >= 0) this.freeOrder[cnt[this.free[i]]++] = i;
      }
      this.res = h.resources.map((r, k) => {
        const p = "r" + k + ".";
        const R = { ...r, k, reserved: new Curve(c(p + "res.ev"), c(p + "res.val")) };
        if (!this.series) {
          R.failed = c(p + "failed"); R.seg = c(p + "seg"); R.off = c(p + "off");
          R.s = {};
          for (const f of ["from", "to", "size", "lane", "stream", "kind", "hi", "lo"]) R.s[f] = c(p + "s." + f);
          R.granted = new Curve(null, this.liveOf((i) => R.seg[i] >= 0));
          R.failedAt = [];
          for (let i = 0; i < this.nb; i++) if (R.failed[i]) R.failedAt.push(this.alloc[i]);
        }
        return R;
      });
    }
    // live bytes after each event of the blocks that pass keep
    liveOf(keep) {
      const d = new Float64Array(this.n + 1);
      for (let i = 0; i < this.nb; i++) {
        if (!keep(i)) continue;
        d[this.alloc[i]] += this.size[i];
        if (this.free[i] >= 0) d[this.free[i]] -= this.size[i];
      }
      const out = new Float64Array(this.n);
      let v = 0;
      for (let e = 0; e < this.n; e++) { v += d[e]; out[e] = v; }
      return out;
    }
    x(e, mode) { return mode === "time" ? this.time[e] : e; }
    // the last event at or before x (-1 if none)
    eventAt(x, mode) {
      if (mode !== "time") return Math.min(this.n - 1, Math.floor(x));
      const t = this.time;
      let lo = 0, hi = t.length;
      while (lo < hi) { const m = (lo + hi) >> 1; if (t[m] <= x) lo = m + 1; else hi = m; }
      return lo - 1;
    }
    domain(mode) { return mode === "time" ? [0, this.time[this.n - 1]] : [0, Math.max(1, this.n)]; }
  }

  // LiveSet is the set of one resource's live blocks after an event, in
  // allocation order, as a linked list swept forward through the events.
  class LiveSet {
    constructor(m, R) {
      this.m = m; this.R = R;
      const n = m.nb;
      this.head = n; this.nxt = new Int32Array(n + 1); this.prv = new Int32Array(n + 1); this.in = new Uint8Array(n);
    }
    ok(i, e) { const f = this.m.free[i]; return this.R.seg[i] >= 0 && this.m.alloc[i] <= e && (f < 0 || f > e); }
    push(i) { const t = this.prv[this.head]; this.nxt[t] = i; this.prv[i] = t; this.nxt[i] = this.head; this.prv[this.head] = i; this.in[i] = 1; }
    reset(e) {
      const m = this.m;
      this.nxt[this.head] = this.prv[this.head] = this.head; this.in.fill(0);
      let lo = 0, hi = m.nb;
      while (lo < hi) { const k = (lo + hi) >> 1; if (m.alloc[k] <= e) lo = k + 1; else hi = k; }
      this.ai = lo;
      for (let i = 0; i < lo; i++) if (this.ok(i, e)) this.push(i);
      lo = 0; hi = m.freeOrder.length;
      while (lo < hi) { const k = (lo + hi) >> 1; if (m.free[m.freeOrder[k]] <= e) lo = k + 1; else hi = k; }
      this.fi = lo; this.e = e;
      return this;
    }
    advance(e) {
      if (e < this.e) return this.reset(e);
      const m = this.m, fo = m.freeOrder;
      while (this.ai < m.nb && m.alloc[this.ai] <= e) { if (this.ok(this.ai, e)) this.push(this.ai); this.ai++; }
      while (this.fi < fo.length && m.free[fo[this.fi]] <= e) {
        const i = fo[this.fi++];
        if (this.in[i]) { this.in[i] = 0; const p = this.prv[i], q = this.nxt[i]; this.nxt[p] = q; this.prv[q] = p; }
      }
      this.e = e;
      return this;
    }
    *[Symbol.iterator]() { for (let i = this.nxt[this.head]; i !== this.head; i = this.nxt[i]) yield i; }
  }

  // ---------------------------------------------------------------- colors
  function hsl(h, s, l) {
    s /= 100; l /= 100;
    const f = (n) => { const k = (n + h / 30) % 12; return l - s * Math.min(l, 1 - l) * Math.max(-1, Math.min(k - 3, 9 - k, 1)); };
    return [f(0), f(8), f(4)].map((x) => Math.round(x * 255));
  }
  const rgba32 = ([r, g, b]) => (255 << 24 | b << 16 | g << 8 | r) >>> 0;
  const css = ([r, g, b]) => `rgb(${r},${g},${b})`;
  // 24 hues a golden angle apart, in two lightnesses: neighbours differ.
  const BAND = Array.from({ length: 24 }, (_, i) => hsl((i * 137.508) % 360, 58, i % 2 ? 70 : 58));
  // Streams get hues of their own, apart from the resources' Okabe-Ito colors.
  const STREAM = ["#7E57C2", "#00897B", "#8D6E63", "#D81B60", "#9E9D24", "#546E7A", "#3949AB", "#FFB300"].map((h) => [1, 3, 5].map((o) => parseInt(h.substr(o, 2), 16)));
  const hashInt = (i) => { i = Math.imul(i ^ (i >>> 16), 0x45d9f3b); i = Math.imul(i ^ (i >>> 16), 0x45d9f3b); return (i ^ (i >>> 16)) >>> 0; };
  const SEG_BG = [[232, 234, 237], [238, 229, 244], [226, 234, 242]].map(rgba32);
  const SEG_EDGE = [[150, 158, 166], [170, 140, 190], [140, 165, 190]].map(rgba32);
  const GRAY = [150, 150, 150];

  // ---------------------------------------------------------------- tooltip
  const tip = document.createElement("div");
  tip.className = "sa-tip";
  document.body.appendChild(tip);
  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    if (props) for (const [k, v] of Object.entries(props)) if (k === "style") e.style.cssText = v; else if (k.startsWith("data-")) e.setAttribute(k, v); else e[k] = v;
    for (const k of kids) if (k != null) e.append(k);
    return e;
  }
  function showTip(ev, node) {
    tip.replaceChildren(node); tip.style.display = "block";
    const r = tip.getBoundingClientRect();
    let x = ev.clientX + 16, y = ev.clientY + 14;
    if (x + r.width > innerWidth - 8) x = ev.clientX - r.width - 16;
    if (y + r.height > innerHeight - 8) y = Math.max(8, innerHeight - r.height - 8);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  }
  const hideTip = () => { tip.style.display = "none"; };

  // ---------------------------------------------------------------- charts
  // A chart is a base canvas and an overlay for the pointer and cursor.
  class Chart {
    constructor(parent, height, label) {
      this.box = el("div", { className: "chart" });
      this.base = el("canvas", { "data-chart": label });
      this.over = el("canvas", { className: "overlay", "data-overlay": label });
      this.box.append(this.base, this.over);
      parent.append(this.box);
      this.cssH = height;
    }
    size(width) {
      const dpr = window.devicePixelRatio || 1;
      this.dpr = dpr; this.cssW = width;
      for (const c of [this.base, this.over]) {
        c.width = Math.round(width * dpr); c.height = Math.round(this.cssH * dpr);
        c.style.width = width + "px"; c.style.height = this.cssH + "px";
      }
      this.pw = width - MARGIN.l - MARGIN.r; this.ph = this.cssH - MARGIN.t - MARGIN.b;
      this.base.dataset.plot = [MARGIN.l, MARGIN.t, this.pw, this.ph].join(",");
    }
    ctx(c) { const x = (c || this.base).getContext("2d"); x.setTransform(this.dpr, 0, 0, this.dpr, 0, 0); return x; }
    // axes: x ticks from the view, y ticks [[value, label]] over [0, top]
    axes(g, v, yTicks, top, yLabel) {
      const { l, t } = MARGIN, W = this.pw, H = this.ph;
      g.strokeStyle = "#e3e7eb"; g.lineWidth = 1; g.fillStyle = "#5f6b76"; g.font = "11px system-ui, 'Liberation Sans', Arial, sans-serif";
      g.textAlign = "right"; g.textBaseline = "middle";
      for (const [val, lab] of yTicks) {
        const y = Math.round(t + H - (val / top) * H) + 0.5;
        g.beginPath(); g.moveTo(l, y); g.lineTo(l + W, y); g.stroke();
        g.fillText(lab, l - 6, y);
      }
      g.textAlign = "center"; g.textBaseline = "top";
      for (const [x, lab] of v.ticks()) {
        const px = Math.round(l + ((x - v.x0) / (v.x1 - v.x0)) * W) + 0.5;
        g.beginPath(); g.moveTo(px, t); g.lineTo(px, t + H); g.stroke();
        g.fillText(lab, px, t + H + 6);
      }
      g.strokeStyle = "#9aa6b2"; g.strokeRect(l + 0.5, t + 0.5, W - 1, H - 1);
      if (yLabel) { g.save(); g.translate(12, t + H / 2); g.rotate(-Math.PI / 2); g.textAlign = "center"; g.fillText(yLabel, 0, 0); g.restore(); }
      this.base.dataset.x0 = v.x0; this.base.dataset.x1 = v.x1; this.base.dataset.ymax = top; this.base.dataset.mode = v.mode;
    }
  }

  // ---------------------------------------------------------------- view
  class View {
    constructor(section, model) {
      this.sec = section; this.m = model;
      this.mode = model.time ? "time" : "event";
      [this.x0, this.x1] = model.domain(this.mode);
      this.rk = 0; this.color = "block"; this.stackBy = "alloc"; this.moment = -1;
      this.hidden = new Set(); // legend entries switched off
      this.root = section.querySelector(".viewer");
      this.root.tabIndex = 0;
      this.build();
    }
    ticks() {
      const span = this.x1 - this.x0, step = niceStep(span, Math.max(2, Math.floor(this.ov.pw / 110)));
      const out = [];
      for (let x = Math.ceil(this.x0 / step) * step; x <= this.x1; x += step)
        out.push([x, this.mode === "time" ? fmtNs(x, step) : fmtInt(x)]);
      return out;
    }
    button(label, pressed, onclick, title) {
      const b = el("button", { type: "button", textContent: label, title: title || "" });
      if (pressed !== null) b.setAttribute("aria-pressed", String(pressed));
      b.addEventListener("click", onclick);
      return b;
    }
    radio(name, options, get, set) {
      const g = el("span", { className: "group" }, el("span", { textContent: name }));
      const bs = options.map(([val, label, enabled = true]) => {
        const b = this.button(label, get() === val, () => { set(val); bs.forEach((x, i) => x.setAttribute("aria-pressed", String(options[i][0] === get()))); this.draw(); });
        b.dataset.value = val; b.disabled = !enabled;
        return b;
      });
      g.append(...bs);
      return g;
    }
    build() {
      const m = this.m, R = m.res;
      const bar = el("div", { className: "bar" });
      bar.append(this.radio("x axis", [["time", "time", !!m.time], ["event", "event"]], () => this.mode, (v) => this.setMode(v)));
      bar.append(el("span", { className: "group" },
        this.button("−", null, () => this.zoom(1.6), "zoom out"), this.button("+", null, () => this.zoom(1 / 1.6), "zoom in"),
        this.button("reset", null, () => this.reset(), "whole trace (double-click)")));
      if (!m.series) {
        bar.append(this.radio("resource", R.map((r, k) => [k, r.name]), () => this.rk, (v) => { this.rk = v; }));
        bar.append(this.radio("color by", [["block", "block"], ["stream", "stream", m.streams.length > 1], ["stack", "stack", m.h.stacks.length > 0]], () => this.color, (v) => { this.color = v; }));
        if (m.streams.length > 1) bar.append(this.radio("stack by", [["alloc", "allocation"], ["stream", "stream"]], () => this.stackBy, (v) => { this.stackBy = v; }));
      }
      this.root.append(bar);
      // legend of the overview
      const legend = el("div", { className: "legend" });
      const item = (key, label, color, dash) => {
        const b = this.button("", !this.hidden.has(key), () => { this.hidden.has(key) ? this.hidden.delete(key) : this.hidden.add(key); b.setAttribute("aria-pressed", String(!this.hidden.has(key))); this.draw(); });
        b.dataset.series = key;
        b.append(el("span", { className: "swatch" + (dash ? " dash" : ""), style: `background-color:${dash ? "transparent" : color};color:${color}` }), label);
        legend.append(b);
      };
      item("live", "live (trace)", "#111", false);
      R.forEach((r) => item("reserved:" + r.name, r.name + " reserved", r.color, false));
      if (m.streamLive) m.streams.forEach((s, i) => item("stream:" + i, "live on stream " + s, css(STREAM[i % STREAM.length]), true));
      this.root.append(el("h3", null, "Live and reserved bytes", el("small", { textContent: m.series ? "downsampled series: each step the maximum since the previous" : "each pixel spans the minimum to the maximum of its events" })));
      this.root.append(legend);
      this.ov = new Chart(this.root, 280, "overview");
      if (!m.series) {
        this.root.append(el("h3", null, "Active memory", el("small", { className: "res-name" })));
        this.root.append(el("p", { className: "hint", textContent: "Every live block of the resource a band, stacked in allocation order (or by stream); each pixel column at its moment of most live memory. Point at a band for the block; click to pick a moment." }));
        this.act = new Chart(this.root, 300, "active");
        this.root.append(el("h3", null, "Memory map", el("small", { className: "map-kind" })));
        this.mapHint = el("p", { className: "hint" });
        this.root.append(this.mapHint);
        this.map = new Chart(this.root, 300, "map");
        this.momentBox = el("div", { className: "moment", textContent: MOMENT_HINT });
        this.root.append(el("h3", null, "Segments at the chosen moment"), this.momentBox);
      } else {
        this.root.append(el("p", { className: "hint", textContent: "Recorded without a timeline (replay.Options.Timeline): no block views." }));
      }
      if (m.h.truncated) this.root.prepend(el("p", { className: "left", textContent: `The timeline covers the first ${fmtInt(m.n)} events of the trace.` }));
      for (const c of this.charts()) this.wire(c);
      this.root.addEventListener("keydown", (e) => this.key(e));
    }
    charts() { return [this.ov, this.act, this.map].filter(Boolean); }
    setMode(mode) {
      const [a, b] = [this.x0, this.x1].map((x) => this.m.eventAt(x, this.mode));
      this.mode = mode;
      const d = this.m.domain(mode);
      if (a <= 0 && b >= this.m.n - 1) [this.x0, this.x1] = d;
      else this.setView(this.m.x(Math.max(0, a), mode), this.m.x(Math.max(0, b), mode) + (mode === "event" ? 1 : 0));
    }
    setView(x0, x1) {
      const [d0, d1] = this.m.domain(this.mode);
      const minSpan = this.mode === "event" ? 4 : Math.max(1000, (d1 - d0) * 1e-9);
      let span = Math.min(d1 - d0, Math.max(minSpan, x1 - x0));
      x0 = Math.max(d0, Math.min(x0, d1 - span));
      this.x0 = x0; this.x1 = x0 + span;
    }
    zoom(f, at) {
      const c = at ?? (this.x0 + this.x1) / 2;
      this.setView(c - (c - this.x0) * f, c + (this.x1 - c) * f);
      this.draw();
    }
    reset() { [this.x0, this.x1] = this.m.domain(this.mode); this.draw(); }
    key(e) {
      const span = this.x1 - this.x0;
      if (e.key === "+" || e.key === "=") this.zoom(1 / 1.6);
      else if (e.key === "-") this.zoom(1.6);
      else if (e.key === "0") this.reset();
      else if (e.key === "Escape" && this.moment >= 0) { this.moment = -1; this.momentBox.replaceChildren(MOMENT_HINT); this.overlays({}); }
      else if (e.key === "ArrowLeft") { this.setView(this.x0 - span / 5, this.x1 - span / 5); this.draw(); }
      else if (e.key === "ArrowRight") { this.setView(this.x0 + span / 5, this.x1 + span / 5); this.draw(); }
      else return;
      e.preventDefault();
    }
    xOf(px) { return this.x0 + ((px - MARGIN.l) / this.ov.pw) * (this.x1 - this.x0); }
    pxOf(x) { return MARGIN.l + ((x - this.x0) / (this.x1 - this.x0)) * this.ov.pw; }
    wire(chart) {
      const o = chart.over;
      let drag = null;
      o.addEventListener("wheel", (e) => { e.preventDefault(); this.zoom(Math.exp(e.deltaY * 0.0015), this.xOf(e.offsetX)); this.hover(chart, e); }, { passive: false });
      o.addEventListener("pointerdown", (e) => { o.setPointerCapture(e.pointerId); drag = { x: e.offsetX, x0: this.x0, x1: this.x1, band: e.shiftKey, moved: false }; });
      o.addEventListener("pointermove", (e) => {
        if (!drag) return this.hover(chart, e);
        const dx = e.offsetX - drag.x;
        if (Math.abs(dx) > 2) drag.moved = true;
        if (drag.band) return this.overlays({ band: [drag.x, e.offsetX], chart });
        const d = (dx / this.ov.pw) * (drag.x1 - drag.x0);
        this.setView(drag.x0 - d, drag.x1 - d); this.draw();
      });
      o.addEventListener("pointerup", (e) => {
        const d = drag; drag = null;
        if (!d) return;
        if (d.band && d.moved) { const [a, b] = [d.x, e.offsetX].sort((p, q) => p - q); this.setView(this.xOf(a), this.xOf(b)); this.draw(); }
        else if (!d.moved) this.pick(e.offsetX);
      });
      o.addEventListener("pointerleave", () => { hideTip(); this.overlays({}); });
      o.addEventListener("dblclick", () => this.reset());
    }
    // column ranges of the plot, in device pixels
    columns(chart) {
      const W = Math.round(chart.pw * chart.dpr), m = this.m, lo = new Int32Array(W), hi = new Int32Array(W);
      const dx = (this.x1 - this.x0) / W;
      for (let c = 0; c < W; c++) {
        const a = this.x0 + c * dx, b = a + dx;
        if (this.mode === "event") { lo[c] = Math.max(0, Math.floor(a)); hi[c] = Math.min(m.n - 1, Math.ceil(b) - 1); }
        else { lo[c] = Math.max(0, m.eventAt(a, "time")); hi[c] = m.eventAt(b - 1e-9, "time"); if (hi[c] < lo[c]) hi[c] = lo[c]; }
        if (hi[c] < lo[c]) lo[c] = -1;
      }
      return { W, lo, hi };
    }
    draw() {
      if (this.pending) return;
      this.pending = requestAnimationFrame(() => { this.pending = 0; this.render(); });
    }
    render() {
      const t0 = performance.now();
      const w = Math.max(480, this.root.clientWidth);
      for (const c of this.charts()) if (c.cssW !== w) c.size(w);
      this.cols = this.columns(this.ov);
      this.renderOverview();
      if (!this.m.series) { this.renderActive(); this.renderMap(); this.renderMoment(); }
      this.overlays({});
      // how long the last redraw took, and the longest (for the check)
      const ms = performance.now() - t0;
      this.root.dataset.frameMs = ms.toFixed(1);
      this.root.dataset.maxFrameMs = Math.max(ms, Number(this.root.dataset.maxFrameMs || 0)).toFixed(1);
    }
    curves() {
      // drawn in this order: streams under the trace's live line, the
      // reserved lines on top
      const m = this.m, out = [];
      if (m.streamLive) m.streamLive.forEach((c, i) => { if (!this.hidden.has("stream:" + i)) out.push({ c, color: css(STREAM[i % STREAM.length]), width: 1.2, dash: [5, 3] }); });
      if (!this.hidden.has("live")) out.push({ c: m.live, color: "#111", width: 1.6 });
      for (const r of m.res) if (!this.hidden.has("reserved:" + r.name)) out.push({ c: r.reserved, color: r.color, width: 1.4 });
      return out;
    }
    renderOverview() {
      const ch = this.ov, g = ch.ctx(), { W, lo, hi } = this.cols, k = ch.dpr;
      g.clearRect(0, 0, ch.cssW, ch.cssH);
      const curves = this.curves(), tmp = [0, 0, 0];
      let ymax = 0;
      const first = lo.findIndex((x) => x >= 0);
      let last = W - 1; while (last >= 0 && lo[last] < 0) last--;
      if (first >= 0) for (const cv of curves) ymax = Math.max(ymax, cv.c.range(lo[first], hi[last], tmp)[1]);
      const ax = byteAxis(ymax);
      this.ovTop = ax.top;
      ch.axes(g, this, ax.ticks, ax.top, "bytes");
      // A level sits on a pixel row's center, as the grid's lines do: a
      // flat line then inks one row in its full color instead of two rows
      // half-blended with the background, on any screen and in any picture.
      const { l, t } = MARGIN, H = ch.ph, y = (v) => Math.round(t + H - (v / ax.top) * H) + 0.5;
      g.save(); g.beginPath(); g.rect(l, t, ch.pw, H); g.clip();
      for (const cv of curves) {
        g.beginPath(); g.strokeStyle = cv.color; g.lineWidth = cv.width; g.setLineDash(cv.dash || []);
        let started = false;
        for (let c = 0; c < W; c++) {
          if (lo[c] < 0) continue;
          const x = l + (c + 0.5) / k;
          const [mn, mx] = cv.c.range(lo[c], hi[c], tmp);
          const v0 = cv.c.at(lo[c]), v1 = cv.c.at(hi[c]);
          if (!started) { g.moveTo(x, y(v0)); started = true; } else g.lineTo(x, y(v0));
          if (mx !== mn) { g.lineTo(x, y(mx)); g.lineTo(x, y(mn)); }
          g.lineTo(x, y(v1));
        }
        g.stroke();
      }
      g.setLineDash([]);
      // refused allocations: a mark at the top in the resource's color
      for (const r of this.m.res) if (r.failedAt && r.failedAt.length && !this.hidden.has("reserved:" + r.name)) {
        g.fillStyle = r.color;
        for (const e of r.failedAt) { const x = this.pxOf(this.m.x(e, this.mode)); if (x >= l && x <= l + ch.pw) { g.beginPath(); g.moveTo(x - 4, t + 1); g.lineTo(x + 4, t + 1); g.lineTo(x, t + 8); g.fill(); } }
      }
      g.restore();
    }
    // rep: per column, the event of most live memory of resource R
    reps(R) {
      const { W, lo, hi } = this.cols, rep = new Int32Array(W), tmp = [0, 0, 0];
      let ymax = 0;
      for (let c = 0; c < W; c++) {
        if (lo[c] < 0) { rep[c] = -1; continue; }
        R.granted.range(lo[c], hi[c], tmp);
        rep[c] = tmp[2] < lo[c] ? lo[c] : tmp[2];
        ymax = Math.max(ymax, tmp[1]);
      }
      return { rep, ymax };
    }
    blockColor(i) {
      const m = this.m;
      if (this.color === "stream") return STREAM[m.stream[i] % STREAM.length];
      // stacks are few: consecutive hues a golden angle apart stay distinct
      if (this.color === "stack") return m.stack[i] < 0 ? GRAY : BAND[m.stack[i] % BAND.length];
      return BAND[hashInt(i) % BAND.length];
    }
    // colors is every block's color as RGBA for an ImageData, kept until
    // the color mode changes.
    colors() {
      const key = this.color;
      if (this.colorKey !== key) {
        const m = this.m, out = new Uint32Array(m.nb);
        for (let i = 0; i < m.nb; i++) out[i] = rgba32(this.blockColor(i));
        this.colorCache = out; this.colorKey = key;
      }
      return this.colorCache;
    }
    // order yields the live blocks bottom-up as the active view stacks them
    *order(set) {
      if (this.stackBy !== "stream") { yield* set; return; }
      for (let s = 0; s < this.m.streams.length; s++) for (const i of set) if (this.m.stream[i] === s) yield i;
    }
    // raster fills the plot's pixels (left transparent where nothing is
    // drawn) and lays them over the axes, so grid lines show only in the
    // empty parts.
    raster(ch, fill, axes) {
      const W = this.cols.W, H = Math.round(ch.ph * ch.dpr);
      const img = new ImageData(W, H), pix = new Uint32Array(img.data.buffer);
      fill(pix, W, H);
      const off = document.createElement("canvas");
      off.width = W; off.height = H;
      off.getContext("2d").putImageData(img, 0, 0);
      const g = ch.ctx();
      g.clearRect(0, 0, ch.cssW, ch.cssH);
      axes(g);
      g.setTransform(1, 0, 0, 1, 0, 0);
      g.drawImage(off, Math.round(MARGIN.l * ch.dpr), Math.round(MARGIN.t * ch.dpr));
    }
    renderActive() {
      const R = this.m.res[this.rk], ch = this.act, { rep, ymax } = this.reps(R), m = this.m;
      this.root.querySelector(".res-name").textContent = R.name;
      const ax = byteAxis(ymax); this.actTop = ax.top; this.actRep = rep;
      const colors = this.colors(), set = new LiveSet(m, R), nxt = set.nxt, head = set.head;
      const passes = this.stackBy === "stream" ? m.streams.length : 1;
      this.raster(ch, (pix, W, H) => {
        const k = H / ax.top;
        let fresh = true;
        for (let c = 0; c < W; c++) {
          if (rep[c] < 0) continue;
          fresh ? set.reset(rep[c]) : set.advance(rep[c]); fresh = false;
          // the same order as order(): allocation order, or by stream
          let cum = 0;
          for (let p = 0; p < passes; p++) {
            for (let i = nxt[head]; i !== head; i = nxt[i]) {
              if (passes > 1 && m.stream[i] !== p) continue;
              const b0 = cum, b1 = (cum += m.size[i]);
              const top = Math.max(0, Math.ceil(H - b1 * k - 0.5)), bot = Math.min(H - 1, Math.floor(H - b0 * k - 0.5));
              if (bot < 0) { p = passes; break; }
              for (let r = top, col = colors[i]; r <= bot; r++) pix[r * W + c] = col;
            }
          }
        }
      }, (g) => ch.axes(g, this, ax.ticks, ax.top, "bytes"));
    }
    renderMap() {
      const R = this.m.res[this.rk], ch = this.map, m = this.m, S = R.s, ns = S.from.length;
      const { rep } = this.reps(R);
      this.mapRep = rep;
      this.root.querySelector(".map-kind").textContent = R.segments === "reported"
        ? `${R.name}: ${fmtInt(ns - R.upstream)} segments${R.upstream ? `, ${fmtInt(R.upstream)} blocks passed to its upstream whole` : ""}`
        : `${R.name} reports no segments: address ranges its blocks occupied`;
      this.mapHint.textContent = "Segments packed into lanes (a lane is reused once its segment is released), each live block where the resource put it: gray is reserved and free. Point at a block or a segment; click to pick a moment.";
      // the height: the highest lane alive in view
      const first = rep.find((e) => e >= 0) ?? 0;
      let last = 0; for (const e of rep) if (e > last) last = e;
      let ymax = 1;
      for (let s = 0; s < ns; s++) if (S.from[s] <= last && (S.to[s] < 0 || S.to[s] > first)) ymax = Math.max(ymax, S.lane[s] + S.size[s]);
      const ax = byteAxis(ymax); this.mapTop = ax.top;
      const colors = this.colors(), set = new LiveSet(m, R), nxt = set.nxt, head = set.head;
      this.raster(ch, (pix, W, H) => {
        const k = H / ax.top;
        const span = (b0, b1) => {
          const top = Math.max(0, Math.ceil(H - b1 * k - 0.5)), bot = Math.min(H - 1, Math.floor(H - b0 * k - 0.5));
          return [top, bot];
        };
        let fresh = true, sp = 0; const alive = [];
        for (let c = 0; c < W; c++) {
          const e = rep[c];
          if (e < 0) continue;
          fresh ? set.reset(e) : set.advance(e); fresh = false;
          while (sp < ns && S.from[sp] <= e) alive.push(sp++);
          for (let j = alive.length - 1; j >= 0; j--) { const s = alive[j]; if (S.to[s] >= 0 && S.to[s] <= e) alive.splice(j, 1); }
          for (const s of alive) {
            const [top, bot] = span(S.lane[s], S.lane[s] + S.size[s]);
            for (let r = top; r <= bot; r++) pix[r * W + c] = SEG_BG[S.kind[s]];
            if (top <= bot) pix[top * W + c] = SEG_EDGE[S.kind[s]];
          }
          for (let i = nxt[head]; i !== head; i = nxt[i]) {
            const b0 = S.lane[R.seg[i]] + R.off[i];
            const top = Math.max(0, Math.ceil(H - (b0 + m.size[i]) * k - 0.5)), bot = Math.min(H - 1, Math.floor(H - b0 * k - 0.5));
            for (let r = top, col = colors[i]; r <= bot; r++) pix[r * W + c] = col;
          }
        }
      }, (g) => ch.axes(g, this, ax.ticks, ax.top, "lane offset"));
    }
    // hit: the block (and segment) drawn at (column c, css y) of a block view
    hit(chart, c, y) {
      const m = this.m, R = m.res[this.rk], rep = chart === this.act ? this.actRep : this.mapRep;
      const e = rep && rep[c];
      if (e == null || e < 0) return null;
      const H = Math.round(chart.ph * chart.dpr), r = Math.floor((y - MARGIN.t) * chart.dpr);
      if (r < 0 || r >= H) return null;
      const top = chart === this.act ? this.actTop : this.mapTop, k = H / top;
      const inRow = (b0, b1) => Math.max(0, Math.ceil(H - b1 * k - 0.5)) <= r && r <= Math.floor(H - b0 * k - 0.5);
      const set = new LiveSet(m, R).reset(e);
      if (chart === this.act) {
        let cum = 0;
        for (const i of this.order(set)) { const b0 = cum; cum += m.size[i]; if (inRow(b0, cum)) return { e, i }; }
        return { e };
      }
      let found = null;
      for (const i of set) { const b0 = R.s.lane[R.seg[i]] + R.off[i]; if (inRow(b0, b0 + m.size[i])) found = { e, i }; }
      if (found) return found;
      for (let s = 0; s < R.s.from.length; s++)
        if (R.s.from[s] <= e && (R.s.to[s] < 0 || R.s.to[s] > e) && inRow(R.s.lane[s], R.s.lane[s] + R.s.size[s])) return { e, seg: s };
      return { e };
    }
    hover(chart, ev) {
      const x = ev.offsetX, m = this.m;
      if (x < MARGIN.l || x > MARGIN.l + chart.pw || ev.offsetY < MARGIN.t || ev.offsetY > MARGIN.t + chart.ph) { hideTip(); this.overlays({}); return; }
      const c = Math.min(this.cols.W - 1, Math.floor((x - MARGIN.l) * chart.dpr));
      if (chart === this.ov) {
        const e = m.eventAt(this.xOf(x), this.mode);
        if (e < 0) { hideTip(); this.overlays({}); return; }
        this.overlays({ x: this.pxOf(m.x(e, this.mode) + (this.mode === "event" ? 0.5 : 0)) });
        const rows = [["live", "live (trace)", m.live.at(e)]];
        for (const r of m.res) rows.push(["reserved:" + r.name, r.name + " reserved", r.reserved.at(e)]);
        if (m.streamLive) m.streamLive.forEach((cv, i) => rows.push(["stream:" + i, "live on stream " + m.streams[i], cv.at(e)]));
        showTip(ev, el("div", { "data-tip": "overview", "data-event": e },
          el("div", { className: "head", textContent: this.where(e) + (m.series ? " (series point)" : "") }),
          el("table", null, ...rows.map(([key, label, v]) => el("tr", { "data-series": key, "data-bytes": v }, el("td", { textContent: label }), el("td", { className: "v", textContent: fmtBytes(v) }), el("td", { className: "v k", textContent: fmtInt(v) + " B" }))))));
        return;
      }
      const h = this.hit(chart, c, ev.offsetY);
      if (!h) { hideTip(); this.overlays({}); return; }
      this.overlays({ x: MARGIN.l + (c + 0.5) / chart.dpr, block: h.i });
      if (h.i != null) showTip(ev, this.blockTip(h.i, h.e));
      else if (h.seg != null) showTip(ev, this.segTip(h.seg, h.e));
      else showTip(ev, el("div", { "data-tip": "empty" }, el("div", { className: "head", textContent: this.where(h.e) }), "nothing live here"));
    }
    where(e) {
      const m = this.m;
      return `event ${fmtInt(e)}` + (m.time ? ` · t = +${fmtNs(m.time[e], 1000)}` : "");
    }
    blockTip(i, e) {
      const m = this.m, R = m.res[this.rk];
      const rows = [["size", fmtBytes(m.size[i]) + " (" + fmtInt(m.size[i]) + " B)"],
        ["stream", m.streams[m.stream[i]]],
        ["allocated", this.where(m.alloc[i])],
        ["freed", m.free[i] < 0 ? "not within the trace" : this.where(m.free[i]) + (m.fstream[i] !== m.stream[i] ? " on stream " + m.streams[m.fstream[i]] : "")]];
      if (m.time && m.free[i] >= 0) rows.push(["lifetime", fmtDur(m.time[m.free[i]] - m.time[m.alloc[i]])]);
      const s = R.seg[i];
      if (s >= 0) {
        const base = R.s.hi[s] * 2 ** 32 + R.s.lo[s] + R.off[i];
        rows.push(["address", hex(Math.floor(base / 2 ** 32), base % 2 ** 32)]);
        rows.push([["segment", "upstream", "region"][R.s.kind[s]], `${hex(R.s.hi[s], R.s.lo[s])} (${fmtBytes(R.s.size[s])}), offset ${fmtBytes(R.off[i])}`]);
      }
      const st = m.stack[i] >= 0 ? m.h.stacks[m.stack[i]].map((f) => m.h.frames[f]) : null;
      return el("div", { "data-tip": "block", "data-block": i, "data-size": m.size[i] },
        el("div", { className: "head", textContent: `block ${fmtInt(i)} on ${R.name}` }),
        el("table", null, ...rows.map(([k, v]) => el("tr", null, el("td", { className: "k", textContent: k }), el("td", { textContent: v })))),
        st ? el("div", { className: "stack", textContent: st.slice(0, 16).join("\n") + (st.length > 16 ? `\n… ${st.length - 16} more frames` : "") })
          : el("div", { className: "stack k", textContent: "no allocation stack in the trace" }));
    }
    segTip(s, e) {
      const R = this.m.res[this.rk], S = R.s;
      return el("div", { "data-tip": "segment" },
        el("div", { className: "head", textContent: `${["segment", "upstream allocation", "address range"][S.kind[s]]} ${hex(S.hi[s], S.lo[s])}` }),
        el("table", null,
          el("tr", null, el("td", { className: "k", textContent: "size" }), el("td", { textContent: fmtBytes(S.size[s]) + " (" + fmtInt(S.size[s]) + " B)" })),
          el("tr", null, el("td", { className: "k", textContent: "owner" }), el("td", { textContent: S.stream[s] < 0 ? "no stream" : "stream " + this.m.streams[S.stream[s]] })),
          el("tr", null, el("td", { className: "k", textContent: "since" }), el("td", { textContent: this.where(S.from[s]) }))),
        el("div", { className: "k", textContent: "free space at " + this.where(e) }));
    }
    overlays({ x, band, block }) {
      for (const ch of this.charts()) {
        const g = ch.ctx(ch.over);
        g.clearRect(0, 0, ch.cssW, ch.cssH);
        const line = (px, color, w) => { if (px < MARGIN.l || px > MARGIN.l + ch.pw) return; g.strokeStyle = color; g.lineWidth = w; g.beginPath(); g.moveTo(px, MARGIN.t); g.lineTo(px, MARGIN.t + ch.ph); g.stroke(); };
        if (this.moment >= 0) line(this.pxOf(this.m.x(this.moment, this.mode) + (this.mode === "event" ? 0.5 : 0)), "#c2185b", 1.5);
        if (x != null) line(x, "rgba(0,0,0,.45)", 1);
        if (band) { g.fillStyle = "rgba(11,98,196,.12)"; g.fillRect(Math.min(...band), MARGIN.t, Math.abs(band[1] - band[0]), ch.ph); }
      }
    }
    pick(px) {
      const e = this.m.eventAt(this.xOf(px), this.mode);
      if (e < 0 || this.m.series) return;
      this.moment = e;
      this.renderMoment(); this.overlays({});
    }
    renderMoment() {
      const e = this.moment, m = this.m;
      if (e < 0) return;
      const R = m.res[this.rk], S = R.s, box = this.momentBox;
      const segs = [];
      for (let s = 0; s < S.from.length; s++) if (S.from[s] <= e && (S.to[s] < 0 || S.to[s] > e)) segs.push(s);
      segs.sort((a, b) => S.hi[a] - S.hi[b] || S.lo[a] - S.lo[b]);
      const inSeg = new Map(segs.map((s) => [s, []]));
      let live = 0;
      for (const i of new LiveSet(m, R).reset(e)) { inSeg.get(R.seg[i])?.push(i); live += m.size[i]; }
      let total = 0, largest = 0, maxSize = 1;
      for (const s of segs) {
        total += S.size[s]; maxSize = Math.max(maxSize, S.size[s]);
        let at = 0;
        for (const i of inSeg.get(s).sort((a, b) => R.off[a] - R.off[b])) { largest = Math.max(largest, R.off[i] - at); at = Math.max(at, R.off[i] + m.size[i]); }
        largest = Math.max(largest, S.size[s] - at);
      }
      box.replaceChildren(el("p", { className: "sum", "data-moment": e, "data-reserved": R.reserved.at(e), "data-segments-bytes": total },
        `${R.name} at ${this.where(e)}: reserved ${fmtBytes(R.reserved.at(e))} (${fmtInt(R.reserved.at(e))} B) · ${fmtInt(segs.length)} ${R.segments === "reported" ? "segments and upstream blocks" : "address ranges"} of ${fmtBytes(total)} · live ${fmtBytes(live)} · free inside ${fmtBytes(Math.max(0, total - live))}, largest hole ${fmtBytes(largest)}`));
      // The segments in address order, flowed into rows, each as wide as
      // its size (the largest at most a row, all in about five rows).
      const W = Math.max(200, box.clientWidth - 26), RH = 18, GAP = 3;
      const perByte = Math.min(W / maxSize, (W * 5) / Math.max(1, total));
      const rects = [];
      let x = 0, y = 0;
      for (const s of segs) {
        const w = Math.max(3, Math.round(S.size[s] * perByte));
        if (x > 0 && x + w > W) { x = 0; y += RH + GAP + 2; }
        rects.push({ s, x, y, w });
        x += w + GAP;
      }
      const H = y + RH, dpr = window.devicePixelRatio || 1, cv = el("canvas", { className: "segments" });
      cv.width = W * dpr; cv.height = H * dpr; cv.style.width = W + "px"; cv.style.height = H + "px";
      const g = cv.getContext("2d"); g.scale(dpr, dpr);
      const BG = [[232, 234, 237], [238, 229, 244], [226, 234, 242]];
      for (const { s, x, y, w } of rects) {
        g.fillStyle = css(BG[S.kind[s]]); g.fillRect(x, y, w, RH);
        for (const i of inSeg.get(s)) { g.fillStyle = css(this.blockColor(i)); g.fillRect(x + (R.off[i] / S.size[s]) * w, y, Math.max(0.75, (m.size[i] / S.size[s]) * w), RH); }
        if (m.streams.length > 1 && S.stream[s] >= 0) { g.fillStyle = css(STREAM[S.stream[s] % STREAM.length]); g.fillRect(x, y + RH, w, 2); }
        g.strokeStyle = "#8a96a2"; g.lineWidth = 1; g.strokeRect(x + 0.5, y + 0.5, w - 1, RH - 1);
      }
      cv.addEventListener("mousemove", (ev) => {
        const r = rects.find((q) => ev.offsetX >= q.x && ev.offsetX < q.x + q.w && ev.offsetY >= q.y && ev.offsetY < q.y + RH);
        if (!r) return hideTip();
        const off = ((ev.offsetX - r.x) / r.w) * S.size[r.s];
        const i = inSeg.get(r.s).find((j) => R.off[j] <= off && off < R.off[j] + m.size[j]);
        showTip(ev, i != null ? this.blockTip(i, e) : this.segTip(r.s, e));
      });
      cv.addEventListener("mouseleave", hideTip);
      box.append(el("div", { className: "segbox" }, cv),
        el("p", { className: "hint", textContent: "Each rectangle a segment, in address order, as wide as its size; blocks in their colors, gray the free space between them" + (m.streams.length > 1 ? "; the strip under a segment, the stream that owns it." : ".") + " Point at one for details." }));
    }
  }

  // ---------------------------------------------------------------- main
  async function main() {
    const views = [];
    for (const sec of document.querySelectorAll("section.trace[data-data]")) {
      const data = document.getElementById(sec.dataset.data);
      try {
        const v = new View(sec, new Model(await decode(data.textContent)));
        v.render();
        views.push(v);
      } catch (err) {
        sec.querySelector(".viewer").textContent = "This trace's data could not be read: " + err.message;
        console.error(err);
      }
    }
    let resizing = 0;
    addEventListener("resize", () => { clearTimeout(resizing); resizing = setTimeout(() => views.forEach((v) => v.draw()), 120); });
    document.documentElement.dataset.renderMs = Math.round(performance.now() - started);
    document.documentElement.dataset.ready = "1";
  }
  main();
})();
