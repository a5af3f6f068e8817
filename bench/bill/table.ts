import type { Bill, BillItem } from './bill.js';

/** The monthly bill as text: the variable and fixed items, then the month at 20, 100 and 1,000 threads. */

const money = (v: number) =>
  v >= 100 ? `$${v.toFixed(0)}` : v >= 1 ? `$${v.toFixed(2)}` : `$${v.toFixed(4)}`;

function quantity(v: number): string {
  if (v === 0) return '0';
  if (v >= 100) return Math.round(v).toLocaleString('en-US');
  return v >= 1 ? v.toFixed(2) : v.toPrecision(3);
}

function itemLines(items: BillItem[]): string[] {
  const shown = items.filter((it) => it.usd > 0 || it.free);
  const w = Math.max(...shown.map((it) => money(it.usd).length));
  return shown
    .sort((a, b) => b.usd - a.usd)
    .map(
      (it) =>
        `  ${money(it.usd).padStart(w)}  ${it.item}: ${quantity(it.quantity)} ${it.unit}${it.free ? ' (free)' : ''}`,
    );
}

export function billLines(b: Bill): string[] {
  const lines = [
    '',
    `AWS BILL — variable, per 1,000 solves: ${money(b.variable_per_1000_solves.total)}`,
    ...itemLines(b.variable_per_1000_solves.items),
    `AWS BILL — fixed, per month: ${money(b.fixed_per_month.total)}`,
    ...itemLines(b.fixed_per_month.items),
    `AWS BILL — per solve: ${b.per_solve.dynamodb_write_units ?? 'n/a'} DynamoDB write units (${b.per_solve.dynamodb_write_units_table ?? 'n/a'} table, ${b.per_solve.dynamodb_write_units_indexes ?? 'n/a'} indexes), ${b.per_solve.aws_requests ?? 'n/a'} AWS requests (${b.per_solve.worker_requests ?? 'n/a'} by the worker)`,
    'AWS BILL — a month (30 days), AWS next to the CaptchaAI plan:',
    '  threads  lanes  r × L      quota  use    solves/month  variable     fixed  AWS total  plan       AWS/plan',
  ];
  for (const m of b.monthly) {
    lines.push(
      `  ${String(m.threads).padStart(7)}  ${String(m.lanes).padStart(5)}  ${`${m.r} × ${m.L}`.padEnd(9)}  ${String(m.lambda_quota_needed).padStart(5)}  ${`${Math.round(m.use * 100)} %`.padEnd(5)}  ${m.solves_per_month.toLocaleString('en-US').padStart(12)}  ${money(m.variable).padStart(8)}  ${money(m.fixed).padStart(8)}  ${money(m.aws_total).padStart(9)}  ${money(m.captchaai_plan).padEnd(9)}  ${m.aws_to_plan.toFixed(2)}×`,
    );
  }
  lines.push(
    `  largest at 20 threads, full use: ${b.dominant_at_20_threads.map((d) => `${d.item.split(' (')[0]} ${money(d.usd_per_month)}`).join('; ')}`,
  );
  if (b.unpriced.length) {
    lines.push(
      `  UNPRICED calls (add them to bench/prices.ts): ${b.unpriced.map((u) => `${u.caller} ${u.service} ${u.operation} ×${u.requests}`).join(', ')}`,
    );
  }
  return lines;
}
