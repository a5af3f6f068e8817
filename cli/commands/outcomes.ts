import { paginateScan } from '@aws-sdk/lib-dynamodb';
import type { Command } from 'commander';
import { isCancelKey } from '../../functions/records/cancellations.js';
import { OUTCOME_FIELDS } from '../../functions/records/fields.js';
import { OutcomesStore } from '../../functions/records/store.js';
import { CliError, EXIT } from '../exit-codes.js';
import { formRefusalOf, formRefusalText } from '../form-refusals.js';
import { describeSelection, type Selection, selectedRows, selectionFrom } from '../record-selection.js';
import { type AwsContext, addStackOptions, output, type StackOptions, withStack } from '../stack.js';
import { OUTCOME_STATUSES, OUTCOME_UNKNOWN } from './status.js';

/**
 * The columns of an outcome row, in export order. Only these are read (ProjectionExpression)
 * and written: whatever else a row might hold never leaves the table through the CLI.
 */
export const OUTCOME_COLUMNS = [...OUTCOME_FIELDS, 'lease_owner', 'lease_expires_at'] as const;

interface OutcomesOptions extends StackOptions {
  batch?: string;
  keys?: string;
  status?: string;
  reason?: string;
  since?: string;
  format: string;
  limit?: string;
  json?: boolean;
}

export function registerOutcomes(program: Command): void {
  addStackOptions(
    program
      .command('outcomes')
      .description('Export outcome rows (one per record_key) from the table; never a token'),
  )
    .option('--batch <id>', "only this batch's rows (a Query on the batch index, no scan)")
    .option(
      '--keys <file>',
      'only the rows of these record keys (one per line, or the JSON lines of a job file; - for stdin), read by key',
    )
    .option('--status <status>', `only rows with this status (${OUTCOME_STATUSES.join(', ')})`)
    .option('--reason <reason>', `only rows with this reason, e.g. ${OUTCOME_UNKNOWN} (to reconcile by hand)`)
    .option(
      '--since <time>',
      'only rows updated at or after TIME: ISO 8601 (2026-11-30T09:00Z) or an age (90m, 2h, 3d)',
    )
    .option('--format <format>', 'jsonl or csv', 'jsonl')
    .option('--limit <n>', 'stop after N rows')
    .option('--json', 'print one JSON array instead of JSON lines')
    .addHelpText(
      'after',
      '\nExamples:\n  $ threadgate outcomes --status failed --since 2h\n' +
        '  $ threadgate outcomes --batch nightly-2026-12-01 --format csv > batch.csv\n' +
        '  $ threadgate outcomes --keys jobs.jsonl\n' +
        `  $ threadgate outcomes --reason ${OUTCOME_UNKNOWN} --format csv   # the form may have taken these\n` +
        '  $ threadgate outcomes --reason FORM_REJECTED   # the form said no (expect_rule names the check)\n' +
        '  $ threadgate outcomes --format csv > outcomes.csv\n' +
        "  $ threadgate outcomes --json | jq 'length'\n",
    )
    .action(async (options: OutcomesOptions) => {
      const format = options.json ? 'json' : options.format;
      if (!['jsonl', 'csv', 'json'].includes(format)) {
        throw new CliError(`--format must be jsonl or csv, got "${options.format}"`, EXIT.usage);
      }
      if (options.status !== undefined && !(OUTCOME_STATUSES as readonly string[]).includes(options.status)) {
        throw new CliError(
          `--status must be one of ${OUTCOME_STATUSES.join(', ')}, got "${options.status}"`,
          EXIT.usage,
        );
      }
      const since = options.since === undefined ? undefined : parseSince(options.since, new Date());
      const limit = options.limit === undefined ? undefined : Number(options.limit);
      if (limit !== undefined && (!Number.isInteger(limit) || limit <= 0)) {
        throw new CliError(`--limit must be a positive integer, got "${options.limit}"`, EXIT.usage);
      }
      const selection = await selectionFrom(options);
      await withStack(options, async (aws, stack) => {
        const table = output(stack, 'TableName');
        const writer = rowWriter(format as 'jsonl' | 'csv' | 'json');
        const filter = { status: options.status, reason: options.reason, since };
        const rows = selection
          ? selectedOutcomeRows(aws, table, selection, filter)
          : outcomeRows(aws, table, filter);
        let n = 0;
        let unknown = 0;
        const refused: Record<string, number> = {};
        for await (const row of rows) {
          writer.row(row);
          n += 1;
          if (row.status === 'failed' && row.reason === OUTCOME_UNKNOWN) unknown += 1;
          const refusal = formRefusalOf(row);
          if (refusal) refused[refusal] = (refused[refusal] ?? 0) + 1;
          if (limit !== undefined && n >= limit) break;
        }
        writer.end();
        const of = selection ? ` of ${describeSelection(selection)}` : '';
        process.stderr.write(`${n} outcome row${n === 1 ? '' : 's'}${of} from ${table}\n`);
        if (unknown > 0) {
          process.stderr.write(
            `${unknown} of them failed ${OUTCOME_UNKNOWN}: the form may have taken ${unknown === 1 ? 'it' : 'them'} although the answer was lost; ` +
              'check each at the target and reconcile by hand (docs/outcomes.md)\n',
          );
        }
        if (formRefusalText(refused)) {
          process.stderr.write(
            `${formRefusalText(refused)} of them: the form answered and said no by the job's expect block ` +
              '(expect_rule names the check; never posted again: docs/outcomes.md)\n',
          );
        }
        const unfiltered = filter.status === undefined && filter.reason === undefined && !since;
        if (selection?.kind === 'keys' && limit === undefined && unfiltered) {
          const missing = selection.keys.length - n;
          if (missing > 0) process.stderr.write(`${missing} of the keys have no row (yet)\n`);
        }
      });
    });
}

/** `2h`, `90m`, `3d`, `45s` ago, or an absolute ISO 8601 time; returns the ISO string to compare with. */
export function parseSince(raw: string, now: Date): string {
  const age = /^(\d+(?:\.\d+)?)\s*(s|m|h|d)$/i.exec(raw.trim());
  if (age) {
    const unit = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[
      age[2]!.toLowerCase() as 's' | 'm' | 'h' | 'd'
    ];
    return new Date(now.getTime() - Number(age[1]) * unit).toISOString();
  }
  const t = Date.parse(raw);
  if (Number.isNaN(t)) {
    throw new CliError(
      `--since must be an ISO 8601 time (2026-11-30T09:00:00Z) or an age like 90m, 2h, 3d; got "${raw}"`,
      EXIT.usage,
    );
  }
  return new Date(t).toISOString();
}

type Row = Record<string, unknown>;

/** The row filters of --status, --reason and --since. */
interface Filter {
  status?: string;
  reason?: string;
  since?: string;
}

/**
 * Every matching row, page by page (Scan with the filters as a FilterExpression: the table's
 * only key is record_key, so there is nothing narrower to query).
 */
async function* outcomeRows(aws: AwsContext, table: string, filter: Filter): AsyncGenerator<Row> {
  const names: Record<string, string> = {};
  OUTCOME_COLUMNS.forEach((c, i) => {
    names[`#c${i}`] = c;
  });
  const values: Record<string, unknown> = {};
  const conditions: string[] = [];
  if (filter.status) {
    values[':status'] = filter.status;
    conditions.push(`#c${OUTCOME_COLUMNS.indexOf('status')} = :status`);
  }
  if (filter.reason !== undefined) {
    values[':reason'] = filter.reason;
    conditions.push(`#c${OUTCOME_COLUMNS.indexOf('reason')} = :reason`);
  }
  if (filter.since) {
    values[':since'] = filter.since;
    conditions.push(`#c${OUTCOME_COLUMNS.indexOf('updated_at')} >= :since`);
  }
  const pages = paginateScan(
    { client: aws.clients.documents },
    {
      TableName: table,
      ProjectionExpression: Object.keys(names).join(', '),
      ExpressionAttributeNames: names,
      ...(conditions.length
        ? { FilterExpression: conditions.join(' AND '), ExpressionAttributeValues: values }
        : {}),
    },
  );
  for await (const page of pages) {
    // A batch cancel is an item of the table, not an outcome (functions/records/cancellations.ts).
    for (const item of page.Items ?? []) if (!isCancelKey(item.record_key)) yield item;
  }
}

/**
 * The rows of a batch (its keys by a Query on the batch index, which holds only what a waiter
 * counts, then the whole rows by BatchGetItem) or of a list of keys (BatchGetItem), with the
 * --status / --since filters applied here: both reads are already narrow.
 */
async function* selectedOutcomeRows(
  aws: AwsContext,
  table: string,
  selection: Selection,
  filter: Filter,
): AsyncGenerator<Row> {
  const store = new OutcomesStore({ client: aws.clients.dynamodb, tableName: table });
  const rows =
    selection.kind === 'batch'
      ? await store.batchFullRows(selection.batchId)
      : await selectedRows(store, selection);
  for (const row of rows) {
    if (filter.status !== undefined && row.status !== filter.status) continue;
    if (filter.reason !== undefined && row.reason !== filter.reason) continue;
    if (filter.since !== undefined && (row.updated_at ?? '') < filter.since) continue;
    yield row as unknown as Row;
  }
}

/** Keeps only the known columns, in their order. */
export function pickColumns(row: Row): Row {
  const out: Row = {};
  for (const c of OUTCOME_COLUMNS) if (row[c] !== undefined) out[c] = row[c];
  return out;
}

export function csvField(value: unknown): string {
  if (value === undefined || value === null) return '';
  const s = String(value);
  return /[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

function rowWriter(format: 'jsonl' | 'csv' | 'json') {
  const out = process.stdout;
  let first = true;
  return {
    row(raw: Row) {
      const row = pickColumns(raw);
      if (format === 'jsonl') out.write(`${JSON.stringify(row)}\n`);
      else if (format === 'json') {
        out.write(`${first ? '[\n' : ',\n'}${JSON.stringify(row)}`);
      } else {
        if (first) out.write(`${OUTCOME_COLUMNS.join(',')}\n`);
        out.write(`${OUTCOME_COLUMNS.map((c) => csvField(row[c])).join(',')}\n`);
      }
      first = false;
    },
    end() {
      if (format === 'json') out.write(first ? '[]\n' : '\n]\n');
      if (format === 'csv' && first) out.write(`${OUTCOME_COLUMNS.join(',')}\n`);
    },
  };
}
