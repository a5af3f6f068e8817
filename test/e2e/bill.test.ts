import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LIST_PRICES } from '../../bench/bill/prices.js';
import type { BenchReport } from '../../bench/report/build.js';
import { runBench } from '../../bench/run.js';
import { E2E } from './harness.js';

/**
 * The bench's monthly bill on a short run of the deployed pipeline (the E2E plan and time scale,
 * so the synthesized assembly is the one the other e2e files share): every AWS operation the
 * emulator counted has a price or an explicit "free" with its reason, and the per-1,000 DynamoDB
 * figure is the counted request units times the price. A new AWS call in a function without a
 * price in bench/prices.ts lands in `unpriced` and fails the first test.
 */
const RECORDS = 6;
let report: BenchReport;
let outDir: string;

beforeAll(async () => {
  outDir = mkdtempSync(join(tmpdir(), 'tg-bill-'));
  report = await runBench({ ...E2E, records: RECORDS, baseline: false, outDir, name: 'bill' });
}, 600_000);
afterAll(() => {
  if (outDir) rmSync(outDir, { recursive: true, force: true });
});

describe('the bench’s bill', () => {
  it('prices every operation the run counted, or names it free with why', () => {
    const bill = report.bill;
    expect(bill).not.toBeNull();
    expect(bill?.unpriced).toEqual([]);
    const ops = new Set(bill?.counted.map((c) => `${c.service}:${c.operation}`));
    // The calls the worker's path makes, counted where they land.
    for (const op of [
      'dynamodb:UpdateItem',
      'sqs:ReceiveMessage',
      'sqs:SendMessageBatch',
      'dynamodb:GetItem',
    ]) {
      expect(ops).toContain(op);
    }
    for (const c of bill?.counted ?? []) if (c.priced === 'free') expect(c.why).toMatch(/\w{3,}/);
  });

  it('puts the counted DynamoDB units times the price into the per-1,000 figure', () => {
    const bill = report.bill;
    if (!bill) throw new Error('no bill');
    // The cap adjuster's (the slot ledger's cap, its expired leases) is a monthly charge, not per solve.
    const rows = bill.counted.filter(
      (c) => c.priced === 'dynamodb-units' && !c.caller.endsWith('-cap-adjuster'),
    );
    const writes = rows.reduce((a, c) => a + c.write_units + c.index_write_units, 0);
    const reads = rows.reduce((a, c) => a + c.read_units, 0);
    const expected =
      ((writes * LIST_PRICES.dynamodbWriteUnit.usd + reads * LIST_PRICES.dynamodbReadUnit.usd) * 1000) /
      bill.solved;
    const billed = bill.variable_per_1000_solves.items
      .filter((it) => it.item.startsWith('DynamoDB '))
      .reduce((a, it) => a + it.usd, 0);
    expect(bill.solved).toBeGreaterThan(0);
    expect(billed).toBeCloseTo(expected, 5);
    expect(report.aws_cost_per_1000.dynamodb_writes + report.aws_cost_per_1000.dynamodb_reads).toBeCloseTo(
      expected,
      4,
    );
    // A record's claim, task marker, posting marker and final write, and its batch-index entry.
    const outcomeWrites = rows.filter((c) => c.operation === 'UpdateItem');
    expect(outcomeWrites.reduce((a, c) => a + c.write_units, 0)).toBeGreaterThanOrEqual(4 * bill.solved);
    expect(outcomeWrites.reduce((a, c) => a + c.index_write_units, 0)).toBeGreaterThanOrEqual(bill.solved);
  });

  it('carries the fixed charges of the template and the month at 20, 100 and 1,000 threads', () => {
    const bill = report.bill;
    const fixed = bill?.fixed_per_month.items.map((it) => it.item).join('\n') ?? '';
    for (const part of [
      'CloudWatch alarms (8 alarms',
      'CloudWatch dashboards (1)',
      'Secrets Manager secrets',
      'custom metrics',
      'cap-adjuster (43,200 scheduled invocations)',
    ]) {
      expect(fixed).toContain(part);
    }
    expect(bill?.monthly.map((m) => `${m.threads}@${m.use}`)).toEqual([
      '20@1',
      '20@0.1',
      '100@1',
      '100@0.1',
      '1000@1',
      '1000@0.1',
    ]);
  });
});
