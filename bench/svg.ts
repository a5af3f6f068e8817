/**
 * A self-contained SVG chart of one benchmark run, no dependencies: the top panel shows
 * CaptchaAI threads in flight, worker invocations in flight, the cap and the plan's threads
 * over time (step lines); the bottom panel shows outcomes per time bucket (stacked bars).
 */

export interface ChartPoint {
  /** Seconds since the start of the run. */
  t: number;
  /** Tasks holding a CaptchaAI thread (the stand-in's count). */
  inFlight: number;
  /** Worker invocations running. */
  invocations?: number;
  cap: number;
  planThreads: number;
}

export interface ChartInput {
  title: string;
  subtitle?: string;
  series: readonly ChartPoint[];
  /** Outcome counts per bucket; `t` is the bucket's start in seconds. */
  outcomes: readonly { t: number; counts: Readonly<Record<string, number>> }[];
  bucketSeconds: number;
  /** The steady-state window, shaded. */
  window?: { from: number; to: number };
}

const WIDTH = 960;
const HEIGHT = 600;
const LEFT = 64;
const RIGHT = 24;
const TOP_PANEL = { y: 72, h: 300 };
const BOTTOM_PANEL = { y: 430, h: 120 };
const OUTCOME_COLORS: Record<string, string> = {
  submitted: '#2e7d32',
  failed: '#c62828',
  rejected: '#ef6c00',
  stopped: '#6a1b9a',
};
const OTHER_COLOR = '#757575';

export function escapeXml(s: string): string {
  return s
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;');
}

function fmt(n: number): string {
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

/** The smallest "nice" tick step (1, 2, 5 × 10^k) that divides `range` into at most `target` intervals. */
export function tickStep(range: number, target = 8): number {
  if (!(range > 0)) return 1;
  const raw = range / target;
  const pow = 10 ** Math.floor(Math.log10(raw));
  const m = raw / pow;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * pow;
}

/** Points of a step line: the value holds until the next sample; repeated values are dropped. */
export function stepPoints(samples: readonly { t: number; v: number }[]): { t: number; v: number }[] {
  const out: { t: number; v: number }[] = [];
  for (const s of samples) {
    const prev = out[out.length - 1];
    if (prev && prev.v === s.v) continue;
    if (prev) out.push({ t: s.t, v: prev.v });
    out.push(s);
  }
  const last = samples[samples.length - 1];
  const tail = out[out.length - 1];
  if (last && tail && tail.t !== last.t) out.push({ t: last.t, v: tail.v });
  return out;
}

interface ChartLine {
  key: string;
  label: string;
  color: string;
  width: number;
  dash?: string;
  get: (p: ChartPoint) => number | undefined;
}

/** The step lines of the top panel. */
const LINES: ChartLine[] = [
  // The cap first, so the dashed plan line stays visible where both are equal.
  { key: 'cap', label: 'cap', color: '#d32f2f', width: 2, get: (p) => p.cap },
  {
    key: 'plan',
    label: 'plan threads',
    color: '#616161',
    width: 2,
    dash: '6 4',
    get: (p) => p.planThreads,
  },
  {
    key: 'invocations',
    label: 'worker invocations in flight',
    color: '#66bb6a',
    width: 1,
    get: (p) => p.invocations,
  },
  {
    key: 'inflight',
    label: 'CaptchaAI tasks in flight',
    color: '#1565c0',
    width: 1.5,
    get: (p) => p.inFlight,
  },
];

/** The chart's scales: time across, threads in the top panel, outcomes per bucket in the bottom one. */
function frameOf(input: ChartInput) {
  const { series, outcomes } = input;
  const tMax = Math.max(
    1,
    series.length ? (series[series.length - 1] as ChartPoint).t : 0,
    ...outcomes.map((o) => o.t + input.bucketSeconds),
  );
  const plotW = WIDTH - LEFT - RIGHT;
  const x = (t: number) => LEFT + (Math.max(0, Math.min(t, tMax)) / tMax) * plotW;
  const yMaxTop = Math.max(
    1,
    ...series.map((p) => Math.max(p.inFlight, p.invocations ?? 0, p.cap, p.planThreads)),
  );
  const topMax = yMaxTop + Math.max(1, Math.ceil(yMaxTop * 0.1));
  const yTop = (v: number) => TOP_PANEL.y + TOP_PANEL.h - (v / topMax) * TOP_PANEL.h;
  const totals = outcomes.map((o) => Object.values(o.counts).reduce((a, b) => a + b, 0));
  const bottomMax = Math.max(1, ...totals);
  const yBottom = (v: number) => BOTTOM_PANEL.y + BOTTOM_PANEL.h - (v / bottomMax) * BOTTOM_PANEL.h;
  return { tMax, plotW, x, topMax, yTop, bottomMax, yBottom };
}

type Frame = ReturnType<typeof frameOf>;

export function renderChart(input: ChartInput): string {
  const f = frameOf(input);
  const parts: string[] = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${WIDTH} ${HEIGHT}" width="${WIDTH}" height="${HEIGHT}" font-family="sans-serif" font-size="12">`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="#ffffff"/>`,
    `<text x="${LEFT}" y="24" font-size="16" font-weight="bold">${escapeXml(input.title)}</text>`,
  );
  if (input.subtitle) {
    parts.push(`<text x="${LEFT}" y="44" fill="#424242">${escapeXml(input.subtitle)}</text>`);
  }
  // Steady-state window, shaded across both panels.
  if (input.window && input.window.to > input.window.from) {
    const x0 = f.x(input.window.from);
    const x1 = f.x(input.window.to);
    parts.push(
      `<rect x="${fmt(x0)}" y="${TOP_PANEL.y}" width="${fmt(x1 - x0)}" height="${BOTTOM_PANEL.y + BOTTOM_PANEL.h - TOP_PANEL.y}" fill="#e3f2fd" opacity="0.6"><title>steady state</title></rect>`,
      `<text x="${fmt(x0 + 4)}" y="${TOP_PANEL.y + 14}" fill="#1565c0">steady state</text>`,
    );
  }
  parts.push(...axes(f, input.bucketSeconds), ...stepLines(input.series, f));
  const kinds = [...new Set(input.outcomes.flatMap((o) => Object.keys(o.counts)))].sort(
    (a, b) => Number(b in OUTCOME_COLORS) - Number(a in OUTCOME_COLORS) || a.localeCompare(b),
  );
  parts.push(...outcomeBars(input, f, kinds), ...legend(kinds));
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

/** Axes, grid and the panels' frames. */
function axes(f: Frame, bucketSeconds: number): string[] {
  const { tMax, plotW, x, topMax, yTop, bottomMax, yBottom } = f;
  const parts: string[] = [];
  const xStep = tickStep(tMax);
  for (let t = 0; t <= tMax + 1e-9; t += xStep) {
    const xx = fmt(x(t));
    parts.push(
      `<line x1="${xx}" y1="${TOP_PANEL.y}" x2="${xx}" y2="${TOP_PANEL.y + TOP_PANEL.h}" stroke="#eeeeee"/>`,
      `<line x1="${xx}" y1="${BOTTOM_PANEL.y}" x2="${xx}" y2="${BOTTOM_PANEL.y + BOTTOM_PANEL.h}" stroke="#eeeeee"/>`,
      `<text x="${xx}" y="${BOTTOM_PANEL.y + BOTTOM_PANEL.h + 16}" text-anchor="middle">${fmt(t)}</text>`,
    );
  }
  parts.push(
    `<text x="${LEFT + plotW / 2}" y="${BOTTOM_PANEL.y + BOTTOM_PANEL.h + 34}" text-anchor="middle">time since the first record was sent (s, wall clock)</text>`,
  );
  const yStep = tickStep(topMax, 6);
  for (let v = 0; v <= topMax + 1e-9; v += yStep) {
    const yy = fmt(yTop(v));
    parts.push(
      `<line x1="${LEFT}" y1="${yy}" x2="${LEFT + plotW}" y2="${yy}" stroke="#eeeeee"/>`,
      `<text x="${LEFT - 6}" y="${yy}" text-anchor="end" dominant-baseline="middle">${fmt(v)}</text>`,
    );
  }
  parts.push(
    `<text transform="translate(16 ${TOP_PANEL.y + TOP_PANEL.h / 2}) rotate(-90)" text-anchor="middle">threads</text>`,
    `<text transform="translate(16 ${BOTTOM_PANEL.y + BOTTOM_PANEL.h / 2}) rotate(-90)" text-anchor="middle">outcomes / ${fmt(bucketSeconds)} s</text>`,
    `<text x="${LEFT - 6}" y="${fmt(yBottom(bottomMax))}" text-anchor="end" dominant-baseline="middle">${bottomMax}</text>`,
    `<text x="${LEFT - 6}" y="${fmt(yBottom(0))}" text-anchor="end" dominant-baseline="middle">0</text>`,
    `<rect x="${LEFT}" y="${TOP_PANEL.y}" width="${plotW}" height="${TOP_PANEL.h}" fill="none" stroke="#9e9e9e"/>`,
    `<rect x="${LEFT}" y="${BOTTOM_PANEL.y}" width="${plotW}" height="${BOTTOM_PANEL.h}" fill="none" stroke="#9e9e9e"/>`,
  );
  return parts;
}

function stepLines(series: readonly ChartPoint[], f: Frame): string[] {
  const parts: string[] = [];
  for (const line of LINES) {
    const samples = series
      .map((p) => ({ t: p.t, v: line.get(p) }))
      .filter((s): s is { t: number; v: number } => s.v !== undefined);
    if (samples.length === 0) continue;
    const pts = stepPoints(samples)
      .map((s) => `${fmt(f.x(s.t))},${fmt(f.yTop(s.v))}`)
      .join(' ');
    parts.push(
      `<polyline data-series="${line.key}" points="${pts}" fill="none" stroke="${line.color}" stroke-width="${line.width}"${line.dash ? ` stroke-dasharray="${line.dash}"` : ''}/>`,
    );
  }
  return parts;
}

/** Stacked outcome bars, one per bucket. */
function outcomeBars(input: ChartInput, f: Frame, kinds: string[]): string[] {
  const parts: string[] = [];
  const barW = Math.max(1, (input.bucketSeconds / f.tMax) * f.plotW - 1);
  for (const o of input.outcomes) {
    let base = 0;
    for (const kind of kinds) {
      const n = o.counts[kind] ?? 0;
      if (n === 0) continue;
      const y0 = f.yBottom(base + n);
      parts.push(
        `<rect data-kind="${escapeXml(kind)}" x="${fmt(f.x(o.t))}" y="${fmt(y0)}" width="${fmt(barW)}" height="${fmt(f.yBottom(base) - y0)}" fill="${OUTCOME_COLORS[kind] ?? OTHER_COLOR}"><title>${fmt(o.t)} s: ${n} ${escapeXml(kind)}</title></rect>`,
      );
      base += n;
    }
  }
  return parts;
}

function legend(kinds: string[]): string[] {
  const parts: string[] = [];
  let lx = LEFT;
  const ly = 60;
  for (const line of LINES) {
    parts.push(
      `<line x1="${lx}" y1="${ly - 4}" x2="${lx + 22}" y2="${ly - 4}" stroke="${line.color}" stroke-width="${Math.max(2, line.width)}"${line.dash ? ` stroke-dasharray="${line.dash}"` : ''}/>`,
      `<text x="${lx + 26}" y="${ly}">${escapeXml(line.label)}</text>`,
    );
    lx += 34 + line.label.length * 6.4;
  }
  let bx = LEFT;
  const by = BOTTOM_PANEL.y - 8;
  for (const kind of kinds) {
    parts.push(
      `<rect x="${bx}" y="${by - 9}" width="10" height="10" fill="${OUTCOME_COLORS[kind] ?? OTHER_COLOR}"/>`,
      `<text x="${bx + 14}" y="${by}">${escapeXml(kind)}</text>`,
    );
    bx += 24 + kind.length * 6.4;
  }
  return parts;
}
