import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { BILL_DOC, billMarkdown, readReportFile, renderBillDoc } from '../../../bench/bill/markdown.js';
import type { BenchReport } from '../../../bench/report/types.js';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';

describe("docs/benchmark.md's bill", () => {
  it('is what `npm run docs:bill` renders from the bench report its marker names', () => {
    const page = readFileSync(`${PACKAGE_ROOT}${BILL_DOC}`, 'utf8');
    expect(page).toBe(renderBillDoc(page, readReportFile));
  });

  it('refuses a report without a bill, and a page without the markers', () => {
    const report = { name: 'x', config: {}, bill: null } as unknown as BenchReport;
    expect(() => billMarkdown(report, 'bench/results/x.json')).toThrow(/has no bill/);
    expect(() => renderBillDoc('# no markers\n', () => report)).toThrow(/lacks the bill markers/);
  });
});

describe("README's cost", () => {
  it('quotes the 20-thread month, full and 10 % use, of the report docs/benchmark.md renders', () => {
    const page = readFileSync(`${PACKAGE_ROOT}${BILL_DOC}`, 'utf8');
    const path = /<!-- bill: (bench\/results\/[\w.-]+\.json) -->/.exec(page)?.[1] ?? '';
    const monthly = readReportFile(path).bill?.monthly ?? [];
    const at = (use: number) => monthly.find((m) => m.threads === 20 && m.use === use);
    const readme = readFileSync(`${PACKAGE_ROOT}README.md`, 'utf8').replace(/\s+/g, ' ');
    const full = at(1);
    const tenth = at(0.1);
    expect(readme).toContain(
      `$${Math.round(full?.aws_total ?? 0)} a month against the plan's $${full?.captchaai_plan.toFixed(2)} (${full?.aws_to_plan.toFixed(2)}×)`,
    );
    expect(readme).toContain(
      `$${tenth?.aws_total.toFixed(2)} (${tenth?.aws_to_plan.toFixed(2)}×) at 10 % use`,
    );
  });
});
