import { createReadStream } from 'node:fs';
import { access, appendFile, readFile, writeFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { CliError, EXIT } from './exit-codes.js';

/**
 * The counts file `threadgate enqueue --counts FILE` keeps and `threadgate wait --counts FILE`
 * reads: `{"batch_id": records}`, the distinct record keys sent under each batch over every
 * enqueue run that named the file. Beside it, `FILE.keys` holds those keys (one JSON line
 * `{"batch_id","record_key"}` each, appended), so a batch sent in parts adds up and a part sent
 * again (after a failed run: re-sending is safe) does not count twice.
 */

/** The sidecar with the keys already counted. */
export const keysFileOf = (countsFile: string): string => `${countsFile}.keys`;

/** Reads the `{batch_id: records}` file; an error names the file and what is wrong. */
export async function readCountsFile(file: string): Promise<Record<string, number>> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new CliError(
      `cannot read --counts ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      EXIT.usage,
    );
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new CliError(`--counts ${file} is not JSON`, EXIT.usage);
  }
  if (
    parsed === null ||
    typeof parsed !== 'object' ||
    Array.isArray(parsed) ||
    Object.values(parsed).some((v) => !Number.isInteger(v) || (v as number) < 0)
  ) {
    throw new CliError(`--counts ${file} must be a JSON object of batch_id → record count`, EXIT.usage);
  }
  return parsed as Record<string, number>;
}

/** The keys already counted for the given batches (other batches' lines are skipped). */
async function countedKeys(file: string, batches: ReadonlySet<string>): Promise<Map<string, Set<string>>> {
  const known = new Map<string, Set<string>>();
  try {
    await access(file);
  } catch {
    return known; // no keys file yet
  }
  for await (const line of createInterface({
    input: createReadStream(file),
    crlfDelay: Number.POSITIVE_INFINITY,
  })) {
    if (line.trim() === '') continue;
    let entry: { batch_id?: unknown; record_key?: unknown };
    try {
      entry = JSON.parse(line) as typeof entry;
    } catch {
      continue; // a line cut short by a crash; its key is counted again at worst (never fewer)
    }
    if (typeof entry.batch_id !== 'string' || typeof entry.record_key !== 'string') continue;
    if (!batches.has(entry.batch_id)) continue;
    const keys = known.get(entry.batch_id) ?? new Set<string>();
    known.set(entry.batch_id, keys);
    keys.add(entry.record_key);
  }
  return known;
}

/**
 * Adds the keys sent in this run to FILE's counts: a batch's count grows by the keys not
 * counted before. Counts of other batches stay as they are. Returns the counts now in FILE for
 * the batches of this run. The counts are written before the keys, so a crash between the two
 * can only count a key twice (wait then reports records missing), never too few (which could
 * end a wait before its batch did).
 */
export async function addToCountsFile(
  path: string,
  sent: ReadonlyMap<string, ReadonlySet<string>>,
): Promise<Record<string, number>> {
  let existing: Record<string, number> = {};
  try {
    existing = await readCountsFile(path);
  } catch (err) {
    if ((err as CliError).message.startsWith('cannot read'))
      existing = {}; // no file yet: start one
    else throw err;
  }
  const keysFile = keysFileOf(path);
  const known = await countedKeys(keysFile, new Set(sent.keys()));
  const totals: Record<string, number> = {};
  const lines: string[] = [];
  for (const [batch, keys] of sent) {
    const before = known.get(batch) ?? new Set<string>();
    const added = [...keys].filter((key) => !before.has(key));
    // A count without keys behind it (a file written by hand or by an older enqueue) is kept and added to.
    totals[batch] = (existing[batch] ?? 0) + added.length;
    for (const key of added) lines.push(JSON.stringify({ batch_id: batch, record_key: key }));
  }
  try {
    await writeFile(path, `${JSON.stringify({ ...existing, ...totals }, null, 2)}\n`);
    if (lines.length) await appendFile(keysFile, `${lines.join('\n')}\n`);
  } catch (err) {
    throw new CliError(
      `cannot write --counts ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      EXIT.failure,
    );
  }
  return totals;
}
