import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { readReportFile } from '../../../bench/bill/markdown.js';
import {
  comeBack,
  PLAN_SIZES,
  renderSizingDoc,
  renderSizingReadme,
  SIZING_DOC,
  SIZING_README,
  sizingRow,
} from '../../../bench/bill/sizing.js';
import type { BenchReport } from '../../../bench/report/types.js';
import { DEFAULTS } from '../../../functions/common/settings.js';
import { capCeiling } from '../../../functions/pipeline/cap-policy.js';
import { MAX_LANES } from '../../../functions/pipeline/lanes.js';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';

/**
 * docs/deploying.md's "Choosing lanes and sizing" table and README's three lines of it are what
 * bench/bill/sizing.ts renders from the code and the bench reports the table's marker names.
 */
const read = (path: string) => readFileSync(`${PACKAGE_ROOT}${path}`, 'utf8');

describe("docs/deploying.md's sizing table", () => {
  it('is what `npm run docs:sizing` renders from the code and the reports its marker names', () => {
    const page = read(SIZING_DOC);
    expect(page).toBe(renderSizingDoc(page, readReportFile));
  });

  it("is on the page's first screen, before the two ways to deploy", () => {
    const page = read(SIZING_DOC);
    const table = page.indexOf('| plan threads | `lanes` |');
    expect(table).toBeGreaterThan(0);
    expect(page.slice(0, table).split('\n').length).toBeLessThan(25);
    expect(table).toBeLessThan(page.indexOf('## A. In your CDK app'));
  });

  it('reaches the largest cap the design allows: the mapping’s 1,000 invocations × the most lanes', () => {
    const largest = PLAN_SIZES.at(-1)!;
    const row = sizingRow(largest, []);
    expect(row.shape).toEqual({ cap: capCeiling(MAX_LANES), r: 1000, L: MAX_LANES });
    expect(largest.planThreads).toBe(capCeiling(MAX_LANES) + DEFAULTS.reserve);
  });

  it('says "not measured" where no report bills that plan, and marks an extrapolated memory', () => {
    const row = sizingRow(PLAN_SIZES.at(-1)!, []);
    expect(row.awsToPlan).toBeUndefined();
    expect(row.measuredPeakMb).toBeUndefined();
    expect(
      renderSizingDoc(
        '<!-- sizing: bench/results/x.json -->\n<!-- sizing: end -->',
        () =>
          ({
            config: { lanes: { setting: 3 }, worker_memory_mb: 1, time_scale: 1 },
            lambda: {},
          }) as unknown as BenchReport,
      ),
    ).toMatch(/not measured[\s\S]*extrapolated, not measured/);
  });

  it('brings a dead invocation’s records back within its timeout and the margin, not the queue’s visibility, and frees its lanes after the lease’s tail', () => {
    // Lease 120 s, then the task deadline (120 s), the cool-down (60 s) and the clocks' 2 s.
    expect(comeBack()).toEqual({ messagesS: 893 + 60, ledgerLanesS: 302 });
  });

  it('refuses a page without the markers', () => {
    expect(() => renderSizingDoc('# no markers\n', readReportFile)).toThrow(/lacks the sizing markers/);
  });
});

describe("README's sizing lines", () => {
  it("are the 20-, 100- and 1,000-thread rows of docs/deploying.md's table", () => {
    const readme = read(SIZING_README);
    expect(readme).toBe(renderSizingReadme(readme, read(SIZING_DOC), readReportFile));
    expect(readme).toContain('(docs/deploying.md#choosing-lanes-and-sizing)');
  });
});
