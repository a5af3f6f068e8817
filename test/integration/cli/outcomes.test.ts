import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { BatchWriteCommand, DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OUTCOME_COLUMNS, parseSince } from '../../../cli/commands/outcomes.js';
import { asStored, type CliStack, cliEnv, runCli, runCliPiped, startCliStack } from '../../fixtures/cli.js';

let stack: CliStack;
const NOW = Date.now();
const iso = (hoursAgo: number) => new Date(NOW - hoursAgo * 3_600_000).toISOString();
const STATUSES = ['submitted', 'failed', 'rejected', 'stopped', 'in_progress'] as const;

/**
 * 130 rows, one hour apart, every status. Each carries a 12 KB column that is not an outcome
 * column: it must never be exported, and it makes the table larger than one 1 MB Scan page,
 * so reading all rows needs the pagination.
 */
const ROWS = Array.from({ length: 130 }, (_, i) => ({
  record_key: `rec-${String(i).padStart(3, '0')}`,
  // Rows 100-129 make up batch "batch-b"; the others have no batch.
  ...(i >= 100 ? { batch_id: 'batch-b' } : {}),
  status: STATUSES[i % STATUSES.length],
  reason: i === 7 ? 'target answered "422", form invalid' : 'ok',
  target_status: 200,
  attempts: 1,
  captcha_type: 'recaptcha_v2',
  solve_ms: 21_000 + i,
  created_at: iso(i),
  updated_at: iso(i),
  debug_blob: `UNEXPORTED-COLUMN-VALUE${'x'.repeat(12_000)}`,
}));

beforeAll(async () => {
  stack = await startCliStack();
  const documents = DynamoDBDocumentClient.from(new DynamoDBClient(stack.clientConfig));
  for (let i = 0; i < ROWS.length; i += 25) {
    await documents.send(
      new BatchWriteCommand({
        RequestItems: {
          [stack.outputs.TableName!]: ROWS.slice(i, i + 25).map((Item) => ({
            PutRequest: { Item: asStored(Item) },
          })),
        },
      }),
    );
  }
});

afterAll(async () => {
  await stack?.stop();
});

describe('threadgate outcomes', () => {
  it('exports every row, across Scan pages, as JSON lines with only the known columns', async () => {
    // Act
    const run = await runCli(['outcomes'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    const rows = run.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(rows).toHaveLength(130);
    expect(rows.map((r) => r.record_key).sort()).toEqual(ROWS.map((r) => r.record_key));
    for (const row of rows)
      expect(Object.keys(row).every((k) => (OUTCOME_COLUMNS as readonly string[]).includes(k))).toBe(true);
    expect(run.stdout).not.toContain('UNEXPORTED-COLUMN-VALUE');
    expect(rows.find((r) => r.record_key === 'rec-007')).toEqual({
      record_key: 'rec-007',
      status: 'rejected',
      reason: 'target answered "422", form invalid',
      target_status: 200,
      attempts: 1,
      captcha_type: 'recaptcha_v2',
      solve_ms: 21_007,
      created_at: iso(7),
      updated_at: iso(7),
    });
    expect(run.stderr).toContain('130 outcome rows');
  });

  it.each([
    ['csv', 'head -1'],
    ['jsonl', 'head -c 10'],
  ])(
    'stops quietly with exit 0 when the reader closes the pipe early (--format %s | %s)',
    async (format, reader) => {
      // Act: the reader exits after the first page of rows; later pages meet a closed pipe.
      const run = await runCliPiped(['outcomes', '--format', format], reader, cliEnv(stack.moto));

      // Assess
      expect(run.code).toBe(0);
      expect(run.stderr).not.toMatch(/EPIPE|Error|at /);
      expect(run.stdout.length).toBeGreaterThan(0);
      if (format === 'csv') expect(run.stdout).toBe(`${OUTCOME_COLUMNS.join(',')}\n`);
    },
  );

  it('filters by --status and --since', async () => {
    // Act: failed rows (i % 5 == 1) updated in the last 20.5 hours: i = 1, 6, 11, 16.
    const run = await runCli(['outcomes', '--status', 'failed', '--since', '1230m'], {
      env: cliEnv(stack.moto),
    });

    // Assess
    expect(run.code).toBe(0);
    const keys = run.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).record_key)
      .sort();
    expect(keys).toEqual(['rec-001', 'rec-006', 'rec-011', 'rec-016']);
  });

  it('writes CSV with a header of the known columns and quotes fields that need it', async () => {
    // Act
    const run = await runCli(['outcomes', '--format', 'csv', '--status', 'rejected'], {
      env: cliEnv(stack.moto),
    });

    // Assess
    expect(run.code).toBe(0);
    const lines = run.stdout.trim().split('\n');
    expect(lines[0]).toBe(OUTCOME_COLUMNS.join(','));
    expect(lines).toHaveLength(1 + 26);
    expect(lines).toContain(
      `rec-007,,rejected,"target answered ""422"", form invalid",200,1,recaptcha_v2,21007,${iso(7)},${iso(7)},,,`,
    );
  });

  it('prints one parseable JSON array with --json, --limit rows long', async () => {
    // Act
    const run = await runCli(['outcomes', '--json', '--limit', '7'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toHaveLength(7);
  });

  it('prints an empty JSON array when nothing matches', async () => {
    // Act
    const run = await runCli(['outcomes', '--json', '--since', '2999-01-01T00:00:00Z'], {
      env: cliEnv(stack.moto),
    });

    // Assess
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual([]);
  });

  it("exports exactly one batch's rows with --batch, with their batch_id, and filters them by --status", async () => {
    // Act
    const all = await runCli(['outcomes', '--batch', 'batch-b'], { env: cliEnv(stack.moto) });
    const failed = await runCli(['outcomes', '--batch', 'batch-b', '--status', 'failed', '--format', 'csv'], {
      env: cliEnv(stack.moto),
    });

    // Assess
    expect(all.code).toBe(0);
    const rows = all.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(rows.map((r) => r.record_key).sort()).toEqual(ROWS.slice(100).map((r) => r.record_key));
    expect(rows.every((r) => r.batch_id === 'batch-b')).toBe(true);
    // Whole rows, not the index's five attributes: the columns the index does not hold are there.
    const { debug_blob: _, ...whole } = ROWS[100]!;
    expect(rows.find((r) => r.record_key === 'rec-100')).toEqual(whole);
    expect(all.stderr).toContain('30 outcome rows of batch "batch-b"');
    const csv = failed.stdout.trim().split('\n');
    expect(
      csv
        .slice(1)
        .map((l) => l.split(',')[0])
        .sort(),
    ).toEqual(
      ROWS.slice(100)
        .filter((r) => r.status === 'failed')
        .map((r) => r.record_key)
        .sort(),
    );
  });

  it('exports the rows of the keys in a file with --keys (plain keys or job lines) and counts keys without a row', async () => {
    // Prepare
    const file = join(mkdtempSync(join(tmpdir(), 'tg-keys-')), 'keys.txt');
    writeFileSync(
      file,
      ['rec-003', '{"record_key":"rec-120","sitekey":"x"}', '', 'rec-404', 'rec-003'].join('\n'),
    );

    // Act
    const run = await runCli(['outcomes', '--keys', file, '--json'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout).map((r: { record_key: string }) => r.record_key)).toEqual([
      'rec-003',
      'rec-120',
    ]);
    expect(run.stderr).toContain('1 of the keys have no row');
  });

  it('refuses --batch with --keys, and a batch id that breaks the batch_id rules', async () => {
    const both = await runCli(['outcomes', '--batch', 'b', '--keys', 'k.txt'], { env: cliEnv(stack.moto) });
    const bad = await runCli(['outcomes', '--batch', 'has space'], { env: cliEnv(stack.moto) });
    expect(both.code).toBe(64);
    expect(both.stderr).toContain('pass --batch ID or --keys FILE, not both');
    expect(bad.code).toBe(64);
    expect(bad.stderr).toContain('--batch: must be printable ASCII without spaces');
  });

  it('refuses an unknown status, naming the allowed ones', async () => {
    // Act
    const run = await runCli(['outcomes', '--status', 'done'], { env: cliEnv(stack.moto) });

    // Assess
    expect(run.code).toBe(64);
    expect(run.stderr).toContain(
      '--status must be one of in_progress, submitted, failed, rejected, cancelled, stopped',
    );
  });

  // Last: its rows are not part of the 130 the tests above count.
  it("exports a form's refusals with their expect_rule and says how many the form refused", async () => {
    // Prepare
    const documents = DynamoDBDocumentClient.from(new DynamoDBClient(stack.clientConfig));
    const refusals = [
      { record_key: 'form-0', status: 'failed', reason: 'FORM_REJECTED', expect_rule: 'body_excludes[0]' },
      { record_key: 'form-1', status: 'failed', reason: 'FORM_UNCONFIRMED', expect_rule: 'body_includes[0]' },
    ].map((r) => ({ ...r, target_status: 200, attempts: 1, created_at: iso(0), updated_at: iso(0) }));
    await documents.send(
      new BatchWriteCommand({
        RequestItems: { [stack.outputs.TableName!]: refusals.map((Item) => ({ PutRequest: { Item } })) },
      }),
    );
    const file = join(mkdtempSync(join(tmpdir(), 'tg-keys-')), 'keys.txt');
    writeFileSync(file, 'form-0\nform-1\n');
    // Act
    const run = await runCli(['outcomes', '--keys', file, '--json'], { env: cliEnv(stack.moto) });
    // Assess
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject([
      { record_key: 'form-0', reason: 'FORM_REJECTED', expect_rule: 'body_excludes[0]' },
      { record_key: 'form-1', reason: 'FORM_UNCONFIRMED', expect_rule: 'body_includes[0]' },
    ]);
    expect(run.stderr).toContain(
      'FORM_REJECTED 1, FORM_UNCONFIRMED 1 of them: the form answered and said no',
    );
  });
});

describe('parseSince', () => {
  it.each([
    ['90m', '2026-11-30T10:30:00.000Z'],
    ['2h', '2026-11-30T10:00:00.000Z'],
    ['1d', '2026-11-29T12:00:00.000Z'],
    ['2026-11-30T09:00Z', '2026-11-30T09:00:00.000Z'],
  ])('reads %s as %s', (raw, expected) => {
    // Act
    const since = parseSince(raw, new Date('2026-11-30T12:00:00Z'));

    // Assess
    expect(since).toBe(expected);
  });

  it('rejects a time it cannot read, with the accepted forms', () => {
    // Act + Assess
    expect(() => parseSince('yesterday', new Date())).toThrow(/ISO 8601 .* 90m, 2h, 3d/);
  });
});
