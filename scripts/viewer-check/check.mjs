// check.mjs: load the replay viewer page in headless Chromium and check it
// as a person would, against the replay's own JSON (scripts/html-check.sh
// runs it; it exits 1 with the reasons when something is wrong).
//
//   node check.mjs PAGE.html RESULTS.json OUTDIR
//
// For every trace section, on the event axis:
//   - with only one resource's reserved line shown (the legend, clicked),
//     a screenshot of the overview has that line's highest pixel where the
//     JSON's peak_reserved_bytes lies on the chart's own axes (height) and
//     within the events of the series point that holds the peak (x);
//   - zooming with the mouse wheel on that point keeps it in view, and
//     hovering each of its events gives tooltips whose largest reserved
//     value is exactly peak_reserved_bytes; after the zoom the line's
//     highest pixel is again where the value lies on the new axes;
//   - the active memory's highest colored pixel is at peak_live_bytes (for
//     a resource that refused nothing), a band there names a block;
//   - clicking the peak picks that moment: the segment panel's reserved
//     bytes are the tooltip's, and for pool, whose reserved bytes are its
//     chunks, the segments add up to them.
// And for the page: no request leaves the file, no console error, the
// summary table has a row per result with its exact peak, the simulated
// banner is there exactly when the JSON says simulated, and the time axis
// works. Screenshots are left in OUTDIR.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { PNG } from "pngjs";

const [pagePath, jsonPath, outDir] = process.argv.slice(2);
if (!outDir) {
  console.error("usage: node check.mjs PAGE.html RESULTS.json OUTDIR");
  process.exit(2);
}
const results = JSON.parse(readFileSync(jsonPath, "utf8"));
const errors = [];
const fail = (msg) => { errors.push(msg); console.log("FAIL " + msg); };
const ok = (msg) => console.log("ok   " + msg);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run"],
});
const context = await browser.newContext({ viewport: { width: 1300, height: 1000 }, deviceScaleFactor: 1 });
await context.route("**/*", (route) => {
  const url = route.request().url();
  if (url.startsWith("file://")) return route.continue();
  fail("the page requested " + url);
  return route.abort();
});
const page = await context.newPage();
page.on("console", (m) => { if (m.type() === "error") fail("console error: " + m.text()); });
page.on("pageerror", (e) => fail("page error: " + e.message));

const t0 = Date.now();
await page.goto("file://" + pagePath);
await page.waitForFunction(() => document.documentElement.dataset.ready === "1", null, { timeout: 90000 });
const renderMs = await page.evaluate(() => Number(document.documentElement.dataset.renderMs));
ok(`page ready after ${Date.now() - t0} ms (script: ${renderMs} ms)`);
const loadMs = Date.now() - t0;

const frames = () => page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));

// ---------------------------------------------------------------- page
const simulated = results.some((r) => r.simulated);
if ((await page.locator("#simulated").count()) !== (simulated ? 1 : 0)) fail(`simulated banner shown ${!simulated}, JSON says simulated ${simulated}`);
else ok(`simulated banner ${simulated ? "shown" : "absent"} as the JSON says`);
const rows = await page.locator("table.summary tbody tr").evaluateAll((trs) => trs.map((tr) => ({
  resource: tr.querySelector("td.resource").textContent, exact: tr.querySelector("td.num small").textContent,
})));
if (rows.length !== results.length) fail(`${rows.length} summary rows, ${results.length} results`);
results.forEach((r, i) => {
  const want = r.peak_reserved_bytes.toLocaleString("en-US") + " B";
  if (!rows[i] || rows[i].exact !== want) fail(`summary row ${i}: ${JSON.stringify(rows[i])}, want ${r.resource} ${want}`);
});
if (!errors.length) ok(`summary table: ${rows.length} rows with the JSON's peaks`);

// ---------------------------------------------------------------- pixels
// topmost pixel of color within the plot box of a chart screenshot, and
// the run of such pixels on that row
function topmost(png, plot, rgb, tol = 40) {
  const [L, T, W, H] = plot;
  for (let y = T + 1; y < T + H - 1; y++) {
    const runs = [];
    for (let x = L + 1; x < L + W - 1; x++) {
      const i = (y * png.width + x) * 4, d = png.data;
      if (Math.abs(d[i] - rgb[0]) <= tol && Math.abs(d[i + 1] - rgb[1]) <= tol && Math.abs(d[i + 2] - rgb[2]) <= tol) {
        if (runs.length && runs[runs.length - 1][1] === x - 1) runs[runs.length - 1][1] = x;
        else runs.push([x, x]);
      }
    }
    if (runs.length) return { y, runs };
  }
  return null;
}
// topmost pixel that is neither background, grid, frame (all grays) nor
// the chosen moment's line
const MOMENT = [194, 24, 91];
function topmostInk(png, plot) {
  const [L, T, W, H] = plot;
  for (let y = T + 2; y < T + H - 1; y++) for (let x = L + 2; x < L + W - 2; x++) {
    const i = (y * png.width + x) * 4, [r, g, b] = png.data.slice(i, i + 3);
    const gray = Math.max(r, g, b) - Math.min(r, g, b) < 12;
    const moment = Math.abs(r - MOMENT[0]) + Math.abs(g - MOMENT[1]) + Math.abs(b - MOMENT[2]) < 90;
    if (!gray && !moment) return { y, x };
  }
  return null;
}
const rgbOf = (hex) => [1, 3, 5].map((o) => parseInt(hex.substr(o, 2), 16));
async function axes(canvas) {
  return canvas.evaluate((c) => ({ plot: c.dataset.plot.split(",").map(Number), x0: +c.dataset.x0, x1: +c.dataset.x1, ymax: +c.dataset.ymax, mode: c.dataset.mode }));
}
// the events of the series points whose field is at least v
function pointsAbove(series, field, v) {
  return series.map((p, i) => [p, i]).filter(([p]) => p[field] >= v).map(([p, i]) => [i > 0 ? series[i - 1].event + 1 : 0, p.event]);
}
// the first series point holding the largest value of field, its events,
// and the events of every point that holds it
function peakPoint(series, field) {
  let best = -1;
  series.forEach((p, i) => { if (best < 0 || p[field] > series[best][field]) best = i; });
  const span = (i) => [i > 0 ? series[i - 1].event + 1 : 0, series[i].event];
  const all = series.map((p, i) => [p, i]).filter(([p]) => p[field] === series[best][field]).map(([, i]) => span(i));
  return { first: span(best)[0], last: span(best)[1], value: series[best][field], all };
}

// ---------------------------------------------------------------- traces
const traces = [...new Set(results.map((r) => r.trace))];
for (const [ti, name] of traces.entries()) {
  const sec = page.locator(`section.trace#trace-${ti}`);
  if ((await sec.locator("h2").textContent()) !== name) { fail(`section ${ti} is not ${name}`); continue; }
  const mine = results.filter((r) => r.trace === name);
  const ov = sec.locator('canvas[data-chart="overview"]'), ovOver = sec.locator('canvas[data-overlay="overview"]');
  const legend = (key) => sec.locator(`.legend button[data-series="${key}"]`);
  const show = async (keys) => {
    for (const b of await sec.locator(".legend button").all()) {
      const on = keys.includes(await b.getAttribute("data-series"));
      if ((await b.getAttribute("aria-pressed")) !== String(on)) await b.click();
    }
    await frames();
  };
  await sec.locator('.bar button[data-value="event"]').click();
  await frames();
  for (const r of mine) {
    const color = await sec.evaluate((s, n) => getComputedStyle(s.querySelector(`.legend button[data-series="reserved:${n}"] .swatch`)).color, r.resource);
    const rgb = color.match(/\d+/g).slice(0, 3).map(Number);
    await page.mouse.move(1, 1);
    await show(["reserved:" + r.resource]);
    const pk = peakPoint(r.series, "reserved");
    if (pk.value !== r.peak_reserved_bytes) fail(`${name} ${r.resource}: series peak ${pk.value}, peak_reserved_bytes ${r.peak_reserved_bytes}`);
    // The line's highest pixels: on the row of the JSON's peak, and
    // each run of them over events of a series point that holds it.
    const check = async (label) => {
      const a = await axes(ov);
      const png = PNG.sync.read(await ov.screenshot({ path: join(outDir, `t${ti}-${r.resource}-${label}.png`) }));
      const got = topmost(png, a.plot, rgb);
      const [L, T, W, H] = a.plot;
      const px = (e) => L + ((e - a.x0) / (a.x1 - a.x0)) * W;
      const wantY = T + H - (pk.value / a.ymax) * H;
      if (!got) return fail(`${name} ${r.resource} (${label}): no pixel of the reserved line's color ${color}`);
      if (Math.abs(got.y - wantY) > 2.5) return fail(`${name} ${r.resource} (${label}): line's top at y=${got.y}, the JSON's peak ${pk.value} B is at y=${wantY.toFixed(1)} (axis top ${a.ymax})`);
      // A screenshot cannot tell values less than a pixel row apart: every
      // run must lie over a point within 2.5 rows of the peak, and once
      // zoomed (4 px an event), one over the peak's own point.
      const near = pointsAbove(r.series, "reserved", pk.value - 2.5 * (a.ymax / H));
      const over = (spans) => ([x0, x1]) => spans.some(([f, l]) => x1 >= px(f) - 2.5 && x0 <= px(l + 1) + 2.5);
      const stray = got.runs.filter((run) => !over(near)(run));
      if (stray.length) return fail(`${name} ${r.resource} (${label}): line's top at x=${JSON.stringify(stray)}, over no series point near the peak`);
      if (label === "zoomed" && !got.runs.some(over([[pk.first, pk.last]]))) return fail(`${name} ${r.resource} (${label}): line's top at x=${JSON.stringify(got.runs)}, not over the peak's events ${pk.first}..${pk.last} (x=${px(pk.first).toFixed(1)}..${px(pk.last + 1).toFixed(1)})`);
      ok(`${name} ${r.resource} (${label}): reserved line's top at y=${got.y} x=${JSON.stringify(got.runs.slice(0, 4))}, the JSON's peak ${pk.value} B at y=${wantY.toFixed(1)}, events ${JSON.stringify(pk.all.slice(0, 4))}`);
    };
    await check("whole");
    // Bring the peak to the middle by dragging, then zoom on it with the
    // wheel, until an event is 4 px wide (or, for a long trace whose
    // series points span many events, until the view is twice the
    // peak's point).
    const wide = 2 * (pk.last + 1 - pk.first);
    const zoomed = (a) => a.plot[2] / (a.x1 - a.x0) >= 4 || (wide > 64 && a.x1 - a.x0 <= wide);
    for (let k = 0; k < 40; k++) {
      const a = await axes(ov);
      if (zoomed(a)) break;
      const [L, T, W, H] = a.plot;
      const box = await ovOver.boundingBox();
      let cx = L + (((pk.first + pk.last + 1) / 2 - a.x0) / (a.x1 - a.x0)) * W;
      if (Math.abs(cx - (L + W / 2)) > W / 6) {
        await page.mouse.move(box.x + cx, box.y + T + H / 2);
        await page.mouse.down();
        await page.mouse.move(box.x + L + W / 2, box.y + T + H / 2, { steps: 4 });
        await page.mouse.up();
        await frames();
        const b = await axes(ov);
        cx = L + (((pk.first + pk.last + 1) / 2 - b.x0) / (b.x1 - b.x0)) * W;
      }
      await page.mouse.move(box.x + cx, box.y + T + H / 2);
      await page.mouse.wheel(0, -400);
      await frames();
    }
    const a = await axes(ov);
    if (a.x0 > pk.first || a.x1 < pk.last + 1 || !zoomed(a)) fail(`${name} ${r.resource}: zoom went to ${a.x0}..${a.x1}, the peak is at events ${pk.first}..${pk.last}`);
    else ok(`${name} ${r.resource}: wheel zoom to events ${a.x0.toFixed(1)}..${a.x1.toFixed(1)}`);
    // hover each event of the peak's point (of a long trace's wide
    // points, the 64 around the zoom's middle: the check still needs
    // the peak among them)
    const box = await ovOver.boundingBox();
    let best = -1, bestEvent = -1;
    const mid = Math.round((pk.first + pk.last + 1) / 2);
    for (let e = Math.max(pk.first, Math.ceil(a.x0), mid - 32); e <= Math.min(pk.last, Math.floor(a.x1) - 1, mid + 31); e++) {
      const [L, T, W, H] = a.plot;
      await page.mouse.move(box.x + L + ((e + 0.5 - a.x0) / (a.x1 - a.x0)) * W, box.y + T + H / 2);
      const tipEvent = await page.locator(".sa-tip [data-tip=overview]").getAttribute("data-event", { timeout: 3000 }).catch(() => null);
      if (tipEvent === null || Number(tipEvent) !== e) { fail(`${name} ${r.resource}: hovering event ${e} shows ${tipEvent}`); break; }
      const v = Number(await page.locator(`.sa-tip tr[data-series="reserved:${r.resource}"]`).getAttribute("data-bytes"));
      if (v > best) { best = v; bestEvent = e; }
    }
    if (pk.last - pk.first >= 64) ok(`${name} ${r.resource}: the peak's series point spans ${pk.last - pk.first + 1} events; hovered 64, largest ${best} B`);
    else if (best !== r.peak_reserved_bytes) fail(`${name} ${r.resource}: the tooltips' largest reserved value is ${best}, the JSON's peak ${r.peak_reserved_bytes}`);
    else ok(`${name} ${r.resource}: tooltip at event ${bestEvent} shows ${best} B reserved, the JSON's peak`);
    await page.mouse.move(1, 1);
    await check("zoomed");
    // pick the moment of the peak: the segment panel agrees
    const [L, T, W, H] = a.plot;
    await page.locator(`section#trace-${ti} .bar .group:has(> span:text-is("resource")) button`).nth(mine.indexOf(r)).click();
    await frames();
    await page.mouse.click(box.x + L + ((bestEvent + 0.5 - a.x0) / (a.x1 - a.x0)) * W, box.y + T + H / 2);
    await frames();
    const sum = sec.locator(".moment p.sum");
    const attr = (k) => sum.getAttribute(k, { timeout: 3000 }).then(Number, () => NaN);
    const moment = await attr("data-moment"), res = await attr("data-reserved"), segs = await attr("data-segments-bytes");
    if (moment !== bestEvent || res !== best) fail(`${name} ${r.resource}: moment panel at event ${moment} with ${res} B reserved, picked ${bestEvent} (${best} B)`);
    else if (r.resource === "pool" && segs !== res) fail(`${name} pool: segments at the peak add up to ${segs} B, reserved ${res} B`);
    else ok(`${name} ${r.resource}: moment panel at event ${moment}: reserved ${res} B, segments ${segs} B`);
    await sec.locator('.bar button:text-is("reset")').click();
    await frames();
    const back = await axes(ov);
    if (back.x0 !== 0 || back.x1 !== r.events) fail(`${name}: reset shows ${back.x0}..${back.x1}, want 0..${r.events}`);
  }
  // active memory of a resource that refused nothing: its top is the peak
  const r = mine.find((x) => x.failures === 0);
  if (r) {
    await sec.locator(".viewer").press("Escape"); // no moment line in the picture
    await page.locator(`section#trace-${ti} .bar .group:has(> span:text-is("resource")) button`).nth(mine.indexOf(r)).click();
    await frames();
    const act = sec.locator('canvas[data-chart="active"]');
    const a = await axes(act);
    const png = PNG.sync.read(await act.screenshot({ path: join(outDir, `t${ti}-active-${r.resource}.png`) }));
    const got = topmostInk(png, a.plot);
    const [L, T, W, H] = a.plot;
    const pk = peakPoint(r.series, "live");
    const wantY = T + H - (r.peak_live_bytes / a.ymax) * H;
    const xa = L + ((pk.first - a.x0) / (a.x1 - a.x0)) * W, xb = L + ((pk.last + 1 - a.x0) / (a.x1 - a.x0)) * W;
    if (!got || Math.abs(got.y - wantY) > 2.5 || got.x < xa - 2.5 || got.x > xb + 2.5) fail(`${name} ${r.resource}: active memory's top at ${JSON.stringify(got)}, the JSON's peak live ${r.peak_live_bytes} B at (${xa.toFixed(1)}..${xb.toFixed(1)}, ${wantY.toFixed(1)})`);
    else ok(`${name} ${r.resource}: active memory's top at (${got.x}, ${got.y}), peak live ${r.peak_live_bytes} B at (${xa.toFixed(1)}..${xb.toFixed(1)}, ${wantY.toFixed(1)})`);
    const box = await sec.locator('canvas[data-overlay="active"]').boundingBox();
    if (got) {
      await page.mouse.move(box.x + got.x, box.y + got.y + 3);
      const size = await page.locator(".sa-tip [data-tip=block]").getAttribute("data-size", { timeout: 3000 }).catch(() => null);
      if (size === null) fail(`${name} ${r.resource}: no block under the pointer at the active memory's top`);
      else ok(`${name} ${r.resource}: the band at the top is a block of ${size} B`);
      await page.mouse.move(1, 1);
    }
  }
  // the time axis
  const timeButton = sec.locator('.bar button[data-value="time"]');
  if (await timeButton.isEnabled()) {
    await timeButton.click();
    await frames();
    const a = await axes(ov);
    if (a.mode !== "time" || !(a.x1 > 0)) fail(`${name}: time axis: mode ${a.mode}, range ${a.x0}..${a.x1}`);
    else ok(`${name}: time axis over ${(a.x1 / 1e6).toFixed(3)} ms of trace time`);
  }
  await show((await sec.locator(".legend button").evaluateAll((bs) => bs.map((b) => b.dataset.series))));
}
// A picture for the docs: the last trace on the event axis, its least
// reserving resource's views, the segments at its live peak.
{
  const ti = traces.length - 1, sec = page.locator(`section.trace#trace-${ti}`);
  const mine = results.filter((r) => r.trace === traces[ti]);
  const least = mine.reduce((a, b) => (b.peak_reserved_bytes < a.peak_reserved_bytes ? b : a));
  await page.locator(`section#trace-${ti} .bar .group:has(> span:text-is("resource")) button`).nth(mine.indexOf(least)).click();
  await frames();
  await sec.locator('.bar button[data-value="event"]').click();
  await frames();
  const ov = sec.locator('canvas[data-chart="overview"]'), a = await axes(ov), box = await sec.locator('canvas[data-overlay="overview"]').boundingBox();
  const pk = peakPoint(least.series, "live");
  await page.mouse.click(box.x + a.plot[0] + ((pk.last + 0.5 - a.x0) / (a.x1 - a.x0)) * a.plot[2], box.y + a.plot[1] + 20);
  await frames();
  await page.mouse.move(1, 1);
  await sec.screenshot({ path: join(outDir, "doc.png") });
}
const frameMs = await page.locator(".viewer").evaluateAll((vs) => vs.map((v) => Number(v.dataset.maxFrameMs)));
ok(`longest redraw of each trace (first draw, zoom, pan, mode and resource changes): ${frameMs.map((x) => x + " ms").join(", ")}`);
writeFileSync(join(outDir, "timing.json"), JSON.stringify({ loadMs, renderMs, maxFrameMs: frameMs }));
await page.mouse.move(1, 1);
await page.screenshot({ path: join(outDir, "page.png"), fullPage: true });
await browser.close();
if (errors.length) {
  console.log(`\nviewer check: ${errors.length} failure(s)`);
  process.exit(1);
}
console.log("\nviewer check: OK");
