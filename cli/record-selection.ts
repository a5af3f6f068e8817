import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { BatchId } from '../functions/records/job-schema.js';
import type { OutcomeRow, OutcomesStore } from '../functions/records/store.js';
import { CliError, EXIT } from './exit-codes.js';

/**
 * Which records a command reads or waits for: one batch (`--batch ID`, read through the
 * table's batch index) or the keys in a file (`--keys FILE`, read by BatchGetItem). Shared by
 * `threadgate outcomes` and `threadgate wait`.
 */
export type Selection = { kind: 'batch'; batchId: string } | { kind: 'keys'; keys: string[]; file: string };

export interface SelectionOptions {
  batch?: string;
  keys?: string;
}

/** The selection the options name, or undefined when they name none; both at once is a usage error. */
export async function selectionFrom(options: SelectionOptions): Promise<Selection | undefined> {
  if (options.batch !== undefined && options.keys !== undefined) {
    throw new CliError('pass --batch ID or --keys FILE, not both', EXIT.usage);
  }
  if (options.batch !== undefined) {
    const batch = BatchId.safeParse(options.batch);
    if (!batch.success) {
      throw new CliError(
        `--batch: ${batch.error.issues[0]?.message ?? 'invalid'} (the batch_id rules of the job schema), got ${JSON.stringify(options.batch)}`,
        EXIT.usage,
      );
    }
    return { kind: 'batch', batchId: batch.data };
  }
  if (options.keys !== undefined)
    return { kind: 'keys', keys: await readKeysFile(options.keys), file: options.keys };
  return undefined;
}

/**
 * The record keys of a file (or `-` for standard input), in order, each once. A line is either
 * a key as it is or a JSON object with a `record_key` (so the job file given to
 * `threadgate enqueue` works as it is); blank lines are skipped.
 */
export async function readKeysFile(file: string): Promise<string[]> {
  if (file !== '-') {
    try {
      if (!(await stat(file)).isFile()) throw new CliError(`--keys ${file} is not a file`, EXIT.usage);
    } catch (err) {
      if (err instanceof CliError) throw err;
      throw new CliError(
        `cannot read --keys ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
        EXIT.usage,
      );
    }
  }
  const input = file === '-' ? process.stdin : createReadStream(file);
  const keys = new Set<string>();
  let lineNo = 0;
  for await (const raw of createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY })) {
    lineNo += 1;
    const line = raw.trim();
    if (line === '') continue;
    if (!line.startsWith('{')) {
      keys.add(line);
      continue;
    }
    let key: unknown;
    try {
      key = (JSON.parse(line) as { record_key?: unknown }).record_key;
    } catch {
      throw new CliError(`--keys ${file} line ${lineNo}: starts with "{" but is not valid JSON`, EXIT.usage);
    }
    if (typeof key !== 'string' || key === '') {
      throw new CliError(`--keys ${file} line ${lineNo}: a JSON line needs a string record_key`, EXIT.usage);
    }
    keys.add(key);
  }
  if (keys.size === 0) throw new CliError(`--keys ${file} holds no record keys`, EXIT.usage);
  return [...keys];
}

/** The rows of the selection: a batch's rows oldest update first, or the keys' rows in file order. */
export async function selectedRows(store: OutcomesStore, selection: Selection): Promise<OutcomeRow[]> {
  if (selection.kind === 'batch') {
    const rows: OutcomeRow[] = [];
    for await (const row of store.batchRows(selection.batchId)) rows.push(row);
    return rows;
  }
  const found = await store.getMany(selection.keys);
  return selection.keys.flatMap((key) => {
    const row = found.get(key);
    return row ? [row] : [];
  });
}

/** `batch "b-1"` or `the 120 keys of keys.txt`, for messages. */
export function describeSelection(selection: Selection): string {
  return selection.kind === 'batch'
    ? `batch ${JSON.stringify(selection.batchId)}`
    : `the ${selection.keys.length} key${selection.keys.length === 1 ? '' : 's'} of ${selection.file}`;
}
