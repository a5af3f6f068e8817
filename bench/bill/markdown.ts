import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { PACKAGE_ROOT } from '../../infra/package-root.js';
import type { BenchReport } from '../report/types.js';
import type { Bill, BillItem } from './bill.js';

/**
 * docs/benchmark.md's bill at the default settings, rendered from one bench report (a JSON file
 * under bench/results/): the variable and fixed items, the month at 20, 100 and 1,000 threads,
 * and the shares the prose reads. `npm run docs:bill` rewrites the part between the markers;
 * test/unit/bench/bill-markdown.test.ts fails when the page and the report differ, so a figure
 * changes only with a new run.
 */

export const BILL_DOC = 'docs/benchmark.md';
const BEGIN = /<!-- bill: (bench\/results\/[\w.-]+\.json) -->\n/;
const END = '<!-- bill: end -->';

const money = (v: number) =>
  v >= 100 ? `$${Math.round(v).toLocaleString('en-US')}` : v >= 1 ? `$${v.toFixed(2)}` : `$${v.toFixed(4)}`;
const quantity = (v: number) =>
  v >= 100 ? Math.round(v).toLocaleString('en-US') : v >= 1 ? v.toFixed(1) : v.toPrecision(3);
const percent = (part: number, whole: number) => `${Math.round((100 * part) / whole)} %`;

function itemRows(items: BillItem[]): string[] {
  return items
    .filter((it) => it.usd > 0 || it.free)
    .sort((a, b) => b.usd - a.usd || a.item.localeCompare(b.item))
    .map(
      (it) => `| ${it.item} | ${quantity(it.quantity)} ${it.unit} | ${it.free ? 'free' : money(it.usd)} |`,
    );
}

/** The share of a total that the items matching `pattern` make. */
function share(items: BillItem[], total: number, pattern: RegExp): string {
  return percent(
    items.filter((it) => pattern.test(it.item)).reduce((sum, it) => sum + it.usd, 0),
    total,
  );
}

const lanesFlag = (lanes: number | undefined) => (lanes && lanes > 1 ? ` --lanes ${lanes}` : '');

/** The markdown between the markers, for the report at `path` (relative to the package root). */
export function billMarkdown(report: BenchReport, path: string): string {
  const bill = report.bill as Bill | null | undefined;
  if (!bill) throw new Error(`${path} has no bill (a run against moto with the template, threadgate bench)`);
  const c = report.config;
  const v = bill.variable_per_1000_solves;
  const f = bill.fixed_per_month;
  const lines = [
    `From \`${path}\`: \`npx threadgate bench --threads ${c.threads} --records ${c.records} --time-scale ${c.time_scale}${lanesFlag(c.lanes?.setting)} --no-baseline --name ${report.name}\`, the default settings (worker ${c.worker_memory_mb} MB${c.lanes ? `, lanes ${c.lanes.setting}: r ${c.lanes.r} × L ${c.lanes.L}` : ''}), ${bill.solved} records submitted, started ${report.started_at.slice(0, 10)}. Regenerate this part with \`npm run docs:bill\`.`,
    '',
    `Variable, per 1,000 solves: **${money(v.total)}**. The worker's Lambda duration is ${share(v.items, v.total, /^Lambda duration — worker/)} of it.`,
    '',
    '| item | per 1,000 solves | USD |',
    '|---|---|---|',
    ...itemRows(v.items),
    '',
    `Fixed, per month: **${money(f.total)}**. CloudWatch (dashboard, custom metrics, alarms) is ${share(f.items, f.total, /^CloudWatch (alarms|dashboards|custom metrics)/)} of it.`,
    '',
    '| item | per month | USD |',
    '|---|---|---|',
    ...itemRows(f.items),
    '',
    ...(bill.per_solve
      ? [
          `Per solve: ${bill.per_solve.dynamodb_write_units} DynamoDB write units (${bill.per_solve.dynamodb_write_units_table} on the table, ${bill.per_solve.dynamodb_write_units_indexes} on the indexes) and ${bill.per_solve.aws_requests} AWS requests (${bill.per_solve.worker_requests} of them the worker's).`,
          '',
        ]
      : []),
    '| plan threads | r × L (Lambda quota needed) | use | solves a month | variable | fixed | AWS | CaptchaAI plan | AWS ÷ plan |',
    '|---|---|---|---|---|---|---|---|---|',
    ...bill.monthly.map(
      (m) =>
        `| ${m.threads.toLocaleString('en-US')} | ${m.r ?? m.threads} × ${m.L ?? 1} (${(m.lambda_quota_needed ?? m.threads + 100).toLocaleString('en-US')}) | ${Math.round(m.use * 100)} % | ${m.solves_per_month.toLocaleString('en-US')} | ${money(m.variable)} | ${money(m.fixed)} | ${money(m.aws_total)} | ${money(m.captchaai_plan)} | ${m.aws_to_plan.toFixed(2)}× |`,
    ),
    '',
    `Largest at 20 threads and full use: ${bill.dominant_at_20_threads.map((d) => `${d.item} ${money(d.usd_per_month)} a month`).join('; ')}.`,
  ];
  if (bill.unpriced.length) {
    lines.push(
      '',
      `**Unpriced calls** (the bill misses them): ${bill.unpriced.map((u) => `${u.caller} ${u.service} ${u.operation}`).join(', ')}.`,
    );
  }
  return `${lines.join('\n')}\n`;
}

const LANES_BEGIN = /<!-- bill-lanes: ((?:bench\/results\/[\w.-]+\.json ?)+) -->\n/;
const LANES_END = '<!-- bill-lanes: end -->';

/**
 * The whole bill at 20, 100 and 1,000 threads in full use for several runs side by side (one row
 * per run and plan size: lanes, memory, the shape r × L, the Lambda quota the reservation needs,
 * AWS against the plan), with each run's DynamoDB write units and AWS requests per solve.
 */
export function lanesMarkdown(reports: { path: string; report: BenchReport }[]): string {
  const lines = [
    '| run (JSON) | lanes | memory | plan threads | r × L | Lambda quota needed | AWS a month | CaptchaAI plan | AWS ÷ plan | DynamoDB write units per solve | AWS requests per solve |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const { path, report } of reports) {
    const bill = report.bill as Bill | null | undefined;
    if (!bill)
      throw new Error(`${path} has no bill (a run against moto with the template, threadgate bench)`);
    const perSolve = bill.per_solve;
    for (const m of bill.monthly.filter((row) => row.use === 1)) {
      const lanes = m.lanes ?? 1;
      const shape = `${(m.r ?? m.threads).toLocaleString('en-US')} × ${m.L ?? 1}`;
      const quota = m.lambda_quota_needed ?? m.threads + 100;
      lines.push(
        `| \`${path.replace('bench/results/', '')}\` | ${lanes} | ${report.config.worker_memory_mb} MB | ${m.threads.toLocaleString('en-US')} | ${shape} | ${quota.toLocaleString('en-US')} | ${money(m.aws_total)} | ${money(m.captchaai_plan)} | **${m.aws_to_plan.toFixed(2)}×** | ${perSolve?.dynamodb_write_units ?? 'not in the report'} | ${perSolve?.aws_requests ?? 'not in the report'} |`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}

/** The page with its bill parts rendered from the reports the begin markers name. */
export function renderBillDoc(page: string, readReport: (path: string) => BenchReport): string {
  const begin = BEGIN.exec(page);
  const end = page.indexOf(END);
  if (!begin || end < begin.index)
    throw new Error(`${BILL_DOC} lacks the bill markers (<!-- bill: PATH --> … ${END})`);
  const path = begin[1] as string;
  const from = begin.index + begin[0].length;
  const rendered = `${page.slice(0, from)}${billMarkdown(readReport(path), path)}${page.slice(end)}`;
  const lanesBegin = LANES_BEGIN.exec(rendered);
  const lanesEnd = rendered.indexOf(LANES_END);
  if (!lanesBegin || lanesEnd < lanesBegin.index) return rendered;
  const paths = (lanesBegin[1] as string).trim().split(' ');
  const lanesFrom = lanesBegin.index + lanesBegin[0].length;
  return `${rendered.slice(0, lanesFrom)}${lanesMarkdown(paths.map((p) => ({ path: p, report: readReport(p) })))}${rendered.slice(lanesEnd)}`;
}

export function readReportFile(path: string): BenchReport {
  return JSON.parse(readFileSync(`${PACKAGE_ROOT}${path}`, 'utf8')) as BenchReport;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const file = `${PACKAGE_ROOT}${BILL_DOC}`;
  writeFileSync(file, renderBillDoc(readFileSync(file, 'utf8'), readReportFile));
  process.stdout.write(`wrote ${file}\n`);
}
