import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { DEFAULTS } from '../../functions/common/settings.js';
import { capCeiling, computeCap } from '../../functions/pipeline/cap-policy.js';
import { type LaneShape, laneShape, MAX_LANES } from '../../functions/pipeline/lanes.js';
import { leaseTimesFor } from '../../functions/worker/invocation/lease.js';
import { RECEIVE_VISIBILITY_MARGIN_S } from '../../functions/worker/invocation/run.js';
import { resolveConfig } from '../../infra/config.js';
import { PACKAGE_ROOT } from '../../infra/package-root.js';
import type { BenchReport } from '../report/types.js';
import { readReportFile } from './markdown.js';

/**
 * docs/deploying.md's "Choosing lanes and sizing" table and README's three lines of it, rendered
 * from the code (laneShape, the worker's default memory, the stack's timeouts, the slot ledger's
 * lease) and from the bench reports the begin marker names (AWS ÷ plan from the bills of those
 * run at time scale 1, the memory's peak from those run with an environment per process). `npm run docs:sizing` rewrites the parts between the markers;
 * test/unit/docs/sizing.test.ts fails when a page and this renderer disagree.
 */

export const SIZING_DOC = 'docs/deploying.md';
export const SIZING_README = 'README.md';
const BEGIN = /<!-- sizing: ((?:bench\/results\/[\w.-]+\.json ?)+) -->\n/;
const END = '<!-- sizing: end -->';
const README_BEGIN = '<!-- sizing-summary -->\n';
const README_END = '<!-- sizing-summary: end -->';

/** Lambda gives one vCPU at 1,769 MB, and CPU in proportion to memory below it. */
export const MB_PER_VCPU = 1769;
/** Lambda keeps 100 of the account's concurrency unreserved: reserving r needs a quota of r + 100. */
export const LAMBDA_UNRESERVED = 100;

/**
 * The plan sizes the table shows and the `lanes` each is recommended: one lane on a 5-thread plan
 * (a cap of 4 allows at most 2 × 2, and its bill is a few Lambda slots), lanes 8 at 20 threads
 * (the lanes measured on a 20-thread plan), lanes 16 from 100 threads (measured on a 100-thread
 * plan), and the largest plan the design reaches: the mapping's 1,000 invocations × lanes 64 (the
 * cap's ceiling), plus the reserve.
 */
export const PLAN_SIZES: readonly { planThreads: number; lanes: number }[] = [
  { planThreads: 5, lanes: 1 },
  { planThreads: 20, lanes: 8 },
  { planThreads: 100, lanes: 16 },
  { planThreads: 1000, lanes: 16 },
  { planThreads: capCeiling(MAX_LANES) + DEFAULTS.reserve, lanes: MAX_LANES },
];

/** One row of the table: what a plan's deploy with its recommended `lanes` gets. */
export interface SizingRow {
  planThreads: number;
  lanes: number;
  shape: LaneShape;
  memoryMb: number;
  /** The worst environment's peak RSS a named report measured at this lanes and memory. */
  measuredPeakMb: number | undefined;
  lambdaQuota: number;
  /** AWS ÷ plan in full use from a named report's bill, with the shape that bill counted. */
  awsToPlan: { ratio: number; path: string; r: number; L: number } | undefined;
}

/** The times after which a dead invocation's records and lanes come back, seconds (same for every row). */
export interface ComeBack {
  /**
   * A message the invocation held (the event's, whose visibility it sets as it starts, or one a
   * lane took itself): at most the invocation's remaining time plus a margin.
   */
  messagesS: number;
  /** The ledger frees its lanes: at most the lease after its last renewal, then the lease's tail. */
  ledgerLanesS: number;
}

const lanesOf = (r: BenchReport) => r.config.lanes?.setting ?? 1;

/** The row of one plan size, its figures read from `reports` where one counted them. */
export function sizingRow(
  size: { planThreads: number; lanes: number },
  reports: { path: string; report: BenchReport }[],
): SizingRow {
  const config = resolveConfig({ lanes: size.lanes });
  const cap = computeCap(size.planThreads, config);
  const shape = laneShape(cap, size.lanes);
  const same = reports.filter(
    ({ report }) =>
      lanesOf(report) === size.lanes && report.config.worker_memory_mb === config.workerMemoryMb,
  );
  const peaks = same.flatMap(({ report }) => {
    const m = report.lambda.measured_memory_mb;
    return m?.isolation === 'process' && m.environment_peak_rss !== null ? [m.environment_peak_rss] : [];
  });
  // Below time scale 1 a run's Lambda duration is estimated, not counted: only time scale 1 bills.
  const billed = same.flatMap(({ path, report }) =>
    (report.config.time_scale === 1 ? (report.bill?.monthly ?? []) : [])
      .filter((m) => m.threads === size.planThreads && m.use === 1)
      .map((m) => ({ ratio: m.aws_to_plan, path, r: m.r ?? m.threads, L: m.L ?? 1 })),
  );
  if (billed.length > 1) {
    throw new Error(
      `${billed.map((b) => b.path).join(' and ')} both bill lanes ${size.lanes} at ${size.planThreads} threads: name one`,
    );
  }
  return {
    planThreads: size.planThreads,
    lanes: size.lanes,
    shape,
    memoryMb: config.workerMemoryMb,
    measuredPeakMb: peaks.length ? Math.max(...peaks) : undefined,
    lambdaQuota: shape.r + LAMBDA_UNRESERVED,
    awsToPlan: billed[0],
  };
}

/** When a dead invocation's records and lanes come back at the default settings. */
export function comeBack(): ComeBack {
  const config = resolveConfig();
  const lease = leaseTimesFor({
    timeScale: config.timeScale,
    captchaTimings: {},
    cooldownMs: config.cooldownMs,
  });
  return {
    messagesS: config.workerTimeoutSeconds + RECEIVE_VISIBILITY_MARGIN_S,
    ledgerLanesS: Math.round((lease.ttlMs + lease.tailMs) / 1000),
  };
}

const n = (v: number) => v.toLocaleString('en-US');
const minutes = (s: number) => `${Math.round(s / 60)} min`;

function awsCell(row: SizingRow): string {
  const a = row.awsToPlan;
  if (!a) return 'not measured';
  const shapeNote =
    a.r === row.shape.r && a.L === row.shape.L ? '' : ` (billed as ${a.r} × ${a.L}, reserve 0)`;
  return `${a.ratio.toFixed(2)}×${shapeNote}`;
}

function memoryCell(row: SizingRow): string {
  const peak = row.measuredPeakMb;
  return `${row.memoryMb} MB (${peak === undefined ? 'extrapolated, not measured' : `peak ${peak} MB measured`})`;
}

/** The table and its notes, between the markers of docs/deploying.md. */
export function sizingMarkdown(reports: { path: string; report: BenchReport }[]): string {
  const rows = PLAN_SIZES.map((size) => sizingRow(size, reports));
  const back = comeBack();
  const backCell = `records ${minutes(back.messagesS)}, lanes ${minutes(back.ledgerLanesS)}`;
  const sources = [...new Set(rows.flatMap((r) => (r.awsToPlan ? [r.awsToPlan.path] : [])))];
  const lines = [
    '| plan threads | `lanes` | r × L (of cap) | worker memory | CPU share | Lambda quota needed (r + 100) | AWS ÷ plan, full use | one failed invocation touches | its records come back, its lanes free, at most after |',
    '|---|---|---|---|---|---|---|---|---|',
    ...rows.map(
      (row) =>
        `| ${n(row.planThreads)} | ${row.lanes} | ${n(row.shape.r)} × ${row.shape.L} = ${n(row.shape.r * row.shape.L)} (of ${n(row.shape.cap)}) | ${memoryCell(row)} | ${(row.memoryMb / MB_PER_VCPU).toFixed(2)} vCPU | ${n(row.lambdaQuota)} | ${awsCell(row)} | up to ${n(2 * row.shape.L)} records | ${backCell} |`,
    ),
    '',
    `Reserve ${DEFAULTS.reserve}, every other setting at its default; regenerate with \`npm run docs:sizing\`. AWS ÷ plan is the whole AWS bill (us-east-1) against the CaptchaAI plan, from ${sources.map((s) => `\`${s}\``).join(' and ')}: each run's counted bill scaled to the plan's shape (how: [benchmark](benchmark.md#what-it-costs-a-month)). The memory's peak is the worst execution environment's as Lambda runs it, from the memory runs this table's marker names. A failed invocation (an OOM, a crash, its timeout) touches up to 2 records a lane (one solving, one posting), and they come back by themselves: each message it held (the event's and those its lanes took) once the invocation's remaining time + ${RECEIVE_VISIBILITY_MARGIN_S} s has passed, not the queue's visibility timeout of 6 × the worker's timeout; the slot ledger frees its lanes once its lease (renewed every third of it) and then the task deadline and the cool-down have passed ([design](design.md#the-slot-ledger)). No lane of a failed invocation can be taken before then, so in flight stays within the cap.`,
  ];
  return `${lines.join('\n')}\n`;
}

/** README's three lines: the 20-, 100- and 1,000-thread rows, in words. */
export function sizingSummary(reports: { path: string; report: BenchReport }[]): string {
  const lines = [20, 100, 1000].map((planThreads) => {
    const size = PLAN_SIZES.find((s) => s.planThreads === planThreads);
    if (!size) throw new Error(`no plan size of ${planThreads} threads`);
    const row = sizingRow(size, reports);
    return `- ${n(planThreads)} threads: \`lanes: ${row.lanes}\`, ${row.shape.r} × ${row.shape.L} at ${row.memoryMb} MB, a Lambda quota of ${n(row.lambdaQuota)}, AWS ÷ plan ${awsCell(row)}.`;
  });
  return `${lines.join('\n')}\n`;
}

/** The paths the deploying page's begin marker names. */
export function sizingSources(page: string): string[] {
  const begin = BEGIN.exec(page);
  if (!begin) throw new Error(`${SIZING_DOC} lacks the sizing markers (<!-- sizing: PATH … --> … ${END})`);
  return (begin[1] as string).trim().split(' ');
}

function between(page: string, begin: RegExp | string, end: string, body: string, doc: string): string {
  const at = typeof begin === 'string' ? page.indexOf(begin) : (begin.exec(page)?.index ?? -1);
  const head = typeof begin === 'string' ? begin : (begin.exec(page)?.[0] ?? '');
  const stop = page.indexOf(end);
  if (at < 0 || stop < at) throw new Error(`${doc} lacks the sizing markers (… ${end})`);
  return `${page.slice(0, at + head.length)}${body}${page.slice(stop)}`;
}

/** docs/deploying.md with its table rendered from the reports its marker names. */
export function renderSizingDoc(page: string, readReport: (path: string) => BenchReport): string {
  const reports = sizingSources(page).map((path) => ({ path, report: readReport(path) }));
  return between(page, BEGIN, END, sizingMarkdown(reports), SIZING_DOC);
}

/** README with its three lines rendered from the reports docs/deploying.md's marker names. */
export function renderSizingReadme(
  readme: string,
  doc: string,
  readReport: (path: string) => BenchReport,
): string {
  const reports = sizingSources(doc).map((path) => ({ path, report: readReport(path) }));
  return between(readme, README_BEGIN, README_END, sizingSummary(reports), SIZING_README);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const docFile = `${PACKAGE_ROOT}${SIZING_DOC}`;
  const doc = renderSizingDoc(readFileSync(docFile, 'utf8'), readReportFile);
  writeFileSync(docFile, doc);
  const readmeFile = `${PACKAGE_ROOT}${SIZING_README}`;
  writeFileSync(readmeFile, renderSizingReadme(readFileSync(readmeFile, 'utf8'), doc, readReportFile));
  process.stdout.write(`wrote ${docFile} and ${readmeFile}\n`);
}
