import { createReadStream, createWriteStream, type WriteStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { SendMessageBatchRequestEntry } from '@aws-sdk/client-sqs';
import type { Command } from 'commander';
import { validateJobMessage } from '../../functions/records/job-schema.js';
import { addToCountsFile } from '../batch-counts.js';
import { CliError, EXIT } from '../exit-codes.js';
import { Progress } from '../progress.js';
import {
  type AwsContext,
  addStackOptions,
  awsContext,
  explainAwsError,
  findStack,
  output,
  type StackOptions,
  sendMessageBatchWithRetries,
  stackName,
} from '../stack.js';
import { messageGroupOf, tenantOf } from '../tenant.js';

interface EnqueueOptions extends StackOptions {
  tenant?: string;
  rejects?: string;
  counts?: string;
  concurrency: string;
  dryRun?: boolean;
  json?: boolean;
}

export interface Rejected {
  line: number;
  reason: string;
  recordKey?: string;
}

export interface SendFailure {
  line: number;
  code: string;
  message: string;
}

export interface Repeat {
  line: number;
  recordKey: string;
  firstLine: number;
}

export interface EnqueueSummary {
  queueUrl: string | null;
  lines: number;
  sent: number;
  rejected: Rejected[];
  failed: SendFailure[];
  repeated: Repeat[];
  /** Distinct record keys sent per batch_id in this run (checked, with --dry-run). */
  batches: Record<string, number>;
  /** With --counts: each batch's count in the file after this run (earlier parts added), what `threadgate wait --batch` expects. */
  counted?: Record<string, number>;
  dryRun: boolean;
}

/** SQS takes at most 10 entries and 256 KiB per SendMessageBatch. */
const BATCH_ENTRIES = 10;
const BATCH_BYTES = 262_144;
/** Lines of rejects / repeats printed to stderr before summarising the rest. */
const PRINT_LIMIT = 100;

export function registerEnqueue(program: Command): void {
  addStackOptions(
    program
      .command('enqueue')
      .description(
        'Validate job lines against the job schema and send the valid ones to the jobs queue in batches of 10',
      )
      .argument('<file>', 'a JSON Lines file, one job per line, or - for standard input'),
  )
    .option(
      '--rejects <file>',
      'also write rejected lines, unchanged, to FILE (fix them and enqueue FILE again)',
    )
    .option(
      '--counts <file>',
      'also add the records sent per batch_id to FILE (JSON; keys counted kept in FILE.keys, so a batch sent in parts adds up and a part sent again counts once), for `threadgate wait --batch ID --counts FILE`',
    )
    .option(
      '--tenant <name>',
      "the MessageGroupId of every message: SQS fair queues share the queue fairly between tenants (default: each line's batch_id; lines without one carry none)",
    )
    .option('--concurrency <n>', 'batches sent at once', '4')
    .option('--dry-run', 'validate only; send nothing (needs no stack)')
    .option('--json', 'print the summary as JSON on stdout')
    .addHelpText(
      'after',
      '\nExamples:\n  $ threadgate enqueue jobs.jsonl --rejects rejected.jsonl\n' +
        "  $ my-export | jq -c '{record_key: .id, sitekey, pageurl, submit_url}' | threadgate enqueue -\n" +
        '  $ threadgate enqueue jobs.jsonl --counts counts.json && threadgate wait --batch nightly-1 --counts counts.json\n' +
        '  $ threadgate enqueue jobs.jsonl --dry-run\n' +
        'Exit codes: 0 all sent; 2 some lines rejected; 4 some sends failed (re-running the file is safe: a\n' +
        'record_key that already has an outcome is not solved again); 64 usage error.\n',
    )
    .action(async (file: string, options: EnqueueOptions) => {
      const concurrency = Number(options.concurrency);
      if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 50) {
        throw new CliError(
          `--concurrency must be an integer from 1 to 50, got "${options.concurrency}"`,
          EXIT.usage,
        );
      }
      const tenant = options.tenant === undefined ? undefined : tenantOf(options.tenant);
      let aws: AwsContext | undefined;
      let queueUrl: string | null = null;
      if (!options.dryRun) {
        aws = await awsContext(options);
        try {
          queueUrl = output(await findStack(aws, stackName(options)), 'QueueUrl');
        } catch (err) {
          throw explainAwsError(err, aws);
        }
      }
      const summary = await enqueue(file, {
        aws,
        queueUrl,
        concurrency,
        ...(tenant === undefined ? {} : { tenant }),
        rejectsPath: options.rejects,
        dryRun: options.dryRun === true,
      });
      const { keysOfBatch, ...result } = summary;
      if (options.counts !== undefined && !options.dryRun)
        result.counted = await addToCountsFile(options.counts, keysOfBatch);
      if (options.json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
      else process.stdout.write(`${describe(result, options.counts)}\n`);
      if (summary.failed.length) process.exitCode = EXIT.transient;
      else if (summary.rejected.length) process.exitCode = EXIT.badTask;
    });
}

function describe(s: EnqueueSummary, countsFile: string | undefined): string {
  const parts = [
    s.dryRun ? `${s.lines} lines checked (dry run, nothing sent)` : `sent ${s.sent} of ${s.lines} lines`,
  ];
  if (s.rejected.length) parts.push(`${s.rejected.length} rejected`);
  if (s.failed.length) parts.push(`${s.failed.length} failed to send (run again; duplicates are safe)`);
  if (s.repeated.length)
    parts.push(`${s.repeated.length} repeated record_key${s.repeated.length === 1 ? '' : 's'}`);
  const lines = [parts.join('; ')];
  for (const [batch, n] of Object.entries(s.batches)) {
    const total = s.counted?.[batch];
    const wait =
      total === undefined
        ? `wait with --expect ${n}`
        : total === n
          ? `wait with --counts ${countsFile}`
          : `${total} in ${countsFile} with the earlier parts: wait with --counts ${countsFile}`;
    lines.push(`batch ${batch}: ${n} record${n === 1 ? '' : 's'} ${s.dryRun ? 'to send' : 'sent'} (${wait})`);
  }
  return lines.join('\n');
}

async function openInput(file: string): Promise<{ stream: NodeJS.ReadableStream; total?: number }> {
  if (file === '-') return { stream: process.stdin };
  try {
    const info = await stat(file);
    if (!info.isFile())
      throw new CliError(`${file} is not a file; pass a JSON Lines file or - for standard input`, EXIT.usage);
  } catch (err) {
    if (err instanceof CliError) throw err;
    throw new CliError(
      `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      EXIT.usage,
    );
  }
  return { stream: createReadStream(file), total: await countLines(file) };
}

/** Lines in a file (a last line without a newline counts), for the progress total. */
async function countLines(file: string): Promise<number> {
  let lines = 0;
  let last = 10;
  for await (const chunk of createReadStream(file)) {
    const buf = chunk as Buffer;
    for (let i = 0; i < buf.length; i++) if (buf[i] === 10) lines++;
    if (buf.length) last = buf[buf.length - 1] ?? 10;
  }
  return last === 10 ? lines : lines + 1;
}

interface SendOptions {
  aws: AwsContext | undefined;
  queueUrl: string | null;
  concurrency: number;
  /** Every message's MessageGroupId; unset: the line's batch_id (messageGroupOf). */
  tenant?: string;
  rejectsPath: string | undefined;
  dryRun: boolean;
}

/**
 * The batches of one enqueue run: lines wait in a batch of at most BATCH_ENTRIES entries and
 * BATCH_BYTES bytes, and at most `concurrency` SendMessageBatch calls are in flight. A line's
 * batch_id and record_key are counted once the line is sent.
 */
class BatchSender {
  /** Batch and key of each line waiting in `batch` or in flight; counted once it is sent. */
  private readonly batchOfLine = new Map<string, { batch: string; key: string }>();
  readonly keysOfBatch = new Map<string, Set<string>>();
  private readonly inflight = new Set<Promise<void>>();
  private batch: { entries: SendMessageBatchRequestEntry[]; bytes: number } = { entries: [], bytes: 0 };
  fatal: unknown;

  constructor(
    private readonly o: SendOptions,
    private readonly summary: EnqueueSummary,
    private readonly progress: Progress,
  ) {}

  /** Adds a valid line, sending the batch before it when the line would not fit. */
  async add(lineNo: number, line: string, job: { record_key: string; batch_id?: string }): Promise<void> {
    const bytes = Buffer.byteLength(line, 'utf8');
    const { entries } = this.batch;
    if (entries.length >= BATCH_ENTRIES || (entries.length > 0 && this.batch.bytes + bytes > BATCH_BYTES)) {
      await this.flush();
    }
    const group = messageGroupOf(job.batch_id, this.o.tenant);
    this.batch.entries.push({
      Id: String(lineNo),
      MessageBody: line,
      ...(group === undefined ? {} : { MessageGroupId: group }),
    });
    if (job.batch_id !== undefined)
      this.batchOfLine.set(String(lineNo), { batch: job.batch_id, key: job.record_key });
    this.batch.bytes += bytes;
  }

  /** Sends what is left and waits for every call in flight. */
  async finish(): Promise<void> {
    if (!this.fatal) await this.flush();
    await Promise.all(this.inflight);
  }

  private countSent(ids: Iterable<string>): void {
    for (const id of ids) {
      const line = this.batchOfLine.get(id);
      if (!line) continue;
      this.batchOfLine.delete(id);
      const keys = this.keysOfBatch.get(line.batch) ?? new Set<string>();
      this.keysOfBatch.set(line.batch, keys);
      keys.add(line.key);
      this.summary.batches[line.batch] = keys.size;
    }
  }

  private async flush(): Promise<void> {
    const { o, summary, progress } = this;
    const entries = this.batch.entries;
    this.batch = { entries: [], bytes: 0 };
    if (entries.length === 0 || o.dryRun || !o.aws || !o.queueUrl) {
      this.countSent(entries.map((e) => e.Id ?? ''));
      progress.tick(entries.length);
      return;
    }
    while (this.inflight.size >= o.concurrency) await Promise.race(this.inflight);
    const p = sendMessageBatchWithRetries(o.aws, o.queueUrl, entries)
      .then((result) => {
        summary.sent += result.sent.length;
        this.countSent(result.sent);
        for (const f of result.failed) {
          const failure = { line: Number(f.id), code: f.code, message: f.message };
          summary.failed.push(failure);
          progress.log(`line ${failure.line}: not sent: ${f.code} ${f.message}`);
        }
        progress.tick(entries.length);
      })
      .catch((err) => {
        this.fatal ??= err;
      })
      .finally(() => this.inflight.delete(p));
    this.inflight.add(p);
  }
}

/** Checks one line; the job when it is to be sent, undefined when it was blank or rejected. */
function admitLine(
  rawLine: string,
  lineNo: number,
  ctx: {
    summary: EnqueueSummary;
    progress: Progress;
    firstLineOf: Map<string, number>;
    rejectsFile: WriteStream | undefined;
  },
): { line: string; job: { record_key: string; batch_id?: string } } | undefined {
  const { summary, progress, firstLineOf } = ctx;
  const line = rawLine.trim();
  if (line === '') {
    progress.tick();
    return undefined; // blank lines carry nothing
  }
  summary.lines += 1;
  const verdict = validateJobMessage(line);
  if (!verdict.ok) {
    summary.rejected.push({
      line: lineNo,
      reason: verdict.reason,
      ...(verdict.recordKey !== undefined ? { recordKey: verdict.recordKey } : {}),
    });
    if (summary.rejected.length <= PRINT_LIMIT) progress.log(`line ${lineNo}: rejected: ${verdict.reason}`);
    ctx.rejectsFile?.write(`${rawLine}\n`);
    progress.tick();
    return undefined;
  }
  const key = verdict.job.record_key;
  const first = firstLineOf.get(key);
  if (first === undefined) firstLineOf.set(key, lineNo);
  else {
    summary.repeated.push({ line: lineNo, recordKey: key, firstLine: first });
    if (summary.repeated.length <= PRINT_LIMIT) {
      progress.log(
        `line ${lineNo}: warning: record_key ${JSON.stringify(key)} repeats line ${first}; it is sent, and solved at most once`,
      );
    }
  }
  return { line, job: verdict.job };
}

async function enqueue(
  file: string,
  o: SendOptions,
): Promise<EnqueueSummary & { keysOfBatch: Map<string, Set<string>> }> {
  const input = await openInput(file);
  const rejectsFile = o.rejectsPath ? await openRejects(o.rejectsPath) : undefined;
  const progress = new Progress({ label: 'enqueue', unit: 'lines', total: input.total });
  const summary: EnqueueSummary = {
    queueUrl: o.queueUrl,
    lines: 0,
    sent: 0,
    rejected: [],
    failed: [],
    repeated: [],
    batches: {},
    dryRun: o.dryRun,
  };
  const sender = new BatchSender(o, summary, progress);
  const ctx = { summary, progress, firstLineOf: new Map<string, number>(), rejectsFile };
  const lines = createInterface({ input: input.stream, crlfDelay: Number.POSITIVE_INFINITY });
  let lineNo = 0;
  for await (const rawLine of lines) {
    lineNo += 1;
    if (sender.fatal) break;
    const admitted = admitLine(rawLine, lineNo, ctx);
    if (admitted) await sender.add(lineNo, admitted.line, admitted.job);
  }
  await sender.finish();
  progress.finish();
  if (rejectsFile) await closeRejects(rejectsFile);
  const more = (n: number, what: string) =>
    n > PRINT_LIMIT ? progress.log(`… and ${n - PRINT_LIMIT} more ${what} (not printed)`) : undefined;
  more(summary.rejected.length, `rejected lines${o.rejectsPath ? ` (all in ${o.rejectsPath})` : ''}`);
  more(summary.repeated.length, 'repeated record_keys');
  if (sender.fatal) {
    const err = o.aws ? explainAwsError(sender.fatal, o.aws) : sender.fatal;
    throw new CliError(
      `${(err as Error).message} — stopped after sending ${summary.sent} messages. Sending the whole file again is safe: ` +
        'a record_key that already has an outcome is not solved again.',
      err instanceof CliError ? err.exitCode : EXIT.transient,
      { cause: sender.fatal },
    );
  }
  return { ...summary, keysOfBatch: sender.keysOfBatch };
}

async function openRejects(path: string): Promise<WriteStream> {
  const stream = createWriteStream(path, { encoding: 'utf8' });
  await new Promise<void>((resolve, reject) => {
    stream.once('open', () => resolve());
    stream.once('error', (err) =>
      reject(
        new CliError(
          `cannot write --rejects ${path}: ${(err as NodeJS.ErrnoException).code ?? err.message}`,
          EXIT.usage,
        ),
      ),
    );
  });
  return stream;
}

function closeRejects(stream: WriteStream): Promise<void> {
  return new Promise((resolve, reject) => {
    stream.end((err?: Error | null) => (err ? reject(err) : resolve()));
  });
}
