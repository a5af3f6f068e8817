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

/** The rows of the selection: a batch's rows shard by shard, or the keys' rows in file order. */
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

/**
 * How far before its previous look's start a look reads from. An index entry whose status_at is
 * older than that when it becomes visible is missed until a full look. It covers the index's
 * propagation (usually under a second), a write's tries (functions/records/store.ts WRITE_TRIES:
 * its status_at is taken before the first) and the skew between the workers' clocks and this one.
 */
export const LOOK_OVERLAP_MS = 15_000;

/**
 * The rows of a selection, look after look, for a waiter. Keys: every row by key each look (the
 * file bounds them). A batch: the first look and every `full` one read the whole batch index;
 * a later look reads only the entries whose status_at is at or after the previous look's start
 * minus LOOK_OVERLAP_MS (rows that entered the batch or ended since), and keeps the rows it
 * knew. A `stopped` row claimed again keeps its status_at, so only a full look sees it in
 * progress: a waiter confirms an end with one (cli/commands/wait.ts).
 */
export class SelectionLooks {
  readonly #rows = new Map<string, OutcomeRow>();
  #since: string | undefined;

  constructor(
    private readonly store: OutcomesStore,
    private readonly selection: Selection,
    private readonly now: () => number = Date.now,
    private readonly overlapMs = LOOK_OVERLAP_MS,
  ) {}

  /** The selection's rows now; `full`: read every row again. */
  async look(full: boolean): Promise<OutcomeRow[]> {
    if (this.selection.kind === 'keys') return selectedRows(this.store, this.selection);
    const since = full ? undefined : this.#since;
    const started = this.now();
    if (since === undefined) this.#rows.clear();
    for await (const row of this.store.batchRows(this.selection.batchId, since)) {
      const known = this.#rows.get(row.record_key);
      if (!known || (known.status_at ?? '') <= (row.status_at ?? '')) this.#rows.set(row.record_key, row);
    }
    this.#since = new Date(started - this.overlapMs).toISOString();
    return [...this.#rows.values()];
  }
}

/** `batch "b-1"` or `the 120 keys of keys.txt`, for messages. */
export function describeSelection(selection: Selection): string {
  return selection.kind === 'batch'
    ? `batch ${JSON.stringify(selection.batchId)}`
    : `the ${selection.keys.length} key${selection.keys.length === 1 ? '' : 's'} of ${selection.file}`;
}
