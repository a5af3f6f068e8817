import { GetFunctionConfigurationCommand } from '@aws-sdk/client-lambda';
import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { paginateScan } from '@aws-sdk/lib-dynamodb';
import type { Command } from 'commander';
import { readCapSettings } from '../../functions/pipeline/cap.js';
import {
  type CapSettings,
  computeCap,
  describeClamp,
  type MaxCapClamp,
  maxCapClamp,
  readCap,
} from '../../functions/pipeline/cap-policy.js';
import { solvesInForce } from '../../functions/pipeline/lanes.js';
import { type BatchCancel, cancelFrom, isCancelKey } from '../../functions/records/cancellations.js';
import { REASON } from '../../functions/records/decisions.js';
import { OUTCOME_STATUSES } from '../../functions/records/fields.js';
import { CliError, EXIT } from '../exit-codes.js';
import { type ChartSample, renderChart } from '../progress.js';
import {
  type AwsContext,
  addStackOptions,
  captchaAiAccess,
  output,
  pipelineControl,
  type StackOptions,
  type ThreadgateStack,
  withStack,
  workerEnvironment,
} from '../stack.js';

export { type ChartSample, renderChart };

interface StatusOptions extends StackOptions {
  json?: boolean;
  watch?: boolean;
  interval: string;
  minutes: string;
  count?: string;
  outcomes: boolean;
}

export { OUTCOME_STATUSES };

/**
 * The reason the worker writes (status `failed`) when the form may have taken a record although
 * its answer was lost: an operator reconciles these by hand (docs/outcomes.md).
 */
export const OUTCOME_UNKNOWN = REASON.OUTCOME_UNKNOWN;

/** The recorded pipeline state and the mapping disagree, and what to run to make them agree. */
export interface PipelineMismatch {
  kind: 'paused_but_mapping_enabled' | 'mapping_disabled_but_not_paused';
  message: string;
  fix: string;
}

export interface StatusReport {
  stack: string;
  at: string;
  /** Where producers send and read: the stack's queue, DLQ and table. */
  resources: { queueUrl: string; dlqUrl: string; tableName: string };
  pipeline: {
    /** The mapping polls the queue. */
    enabled: boolean;
    mappingState: string;
    mappingUuid: string;
    paused: boolean;
    reason?: string;
    code?: string;
    since?: string;
    by?: string;
    /** Set when the recorded state and the mapping disagree (a pause or resume whose second step failed). */
    mismatch: PipelineMismatch | null;
  };
  /**
   * The cap in force: solves allowed in flight now (functions/pipeline/cap-policy.ts capInForce):
   * the lower of reserved concurrency and the mapping maximum, 0 while paused, null when neither is set.
   */
  cap: number | null;
  /**
   * With lanes (functions/pipeline/lanes.ts): the invocations the knobs allow (r), the lanes each
   * runs (L; invocations started before the knobs last fell run at most `olderInvocationsLanes`),
   * and the threads working at CaptchaAI now (this pipeline's busy lanes plus any other user of
   * the key). null with one lane per invocation.
   */
  lanes: {
    invocations: number | null;
    lanesPerInvocation: number;
    olderInvocationsLanes?: number;
    busy: number | null;
  } | null;
  reservedConcurrency: number | null;
  mappingMaximumConcurrency: number | null;
  batchSize: number | null;
  plan:
    | {
        threads: number;
        workingThreads: number;
        /** The adjuster's settings (null when its environment cannot be read). */
        reserve: number | null;
        minCap: number | null;
        maxCap: number | null;
        /** What the adjuster will set: computeCap(threads, its settings). */
        targetCap: number | null;
        /** Set when maxCap holds the cap below threads − reserve: the threads it leaves idle. */
        clampedByMaxCap: MaxCapClamp | null;
      }
    | { error: string };
  queue: { depth: number; inFlight: number; delayed: number };
  dlq: { depth: number; inFlight: number };
  /** The outcome stream's failure queue: records the stream gave up publishing (null without the stream). */
  outcomeFailures: { queueUrl: string; depth: number; inFlight: number } | null;
  /** Outcome rows by status (null with --no-outcomes). */
  outcomes: Record<string, number> | null;
  /** Rows `failed` with reason OUTCOME_UNKNOWN: to reconcile by hand (null with --no-outcomes). */
  outcomeUnknown: number | null;
  /** Batches cancelled with `threadgate cancel`, oldest first (null with --no-outcomes: read by the same scan). */
  cancelledBatches: BatchCancel[] | null;
  warnings: string[];
}

export function registerStatus(program: Command): void {
  addStackOptions(
    program
      .command('status')
      .description(
        'Cap, concurrency settings, paused or running, CaptchaAI plan threads, queue/DLQ depth and outcomes by status',
      ),
  )
    .option('--json', 'print the report as JSON (with --watch: one JSON object per line)')
    .option('-w, --watch', 'refresh until interrupted and chart in flight against the cap')
    .option('--interval <seconds>', 'seconds between refreshes with --watch', '5')
    .option('--minutes <n>', 'minutes of history in the --watch chart', '10')
    .option('--count <n>', 'with --watch: stop after this many refreshes')
    .option('--no-outcomes', 'skip counting outcome rows (a full table scan)')
    .addHelpText(
      'after',
      '\nExamples:\n  $ threadgate status\n  $ threadgate status --json | jq .cap\n  $ threadgate status --watch --interval 10\n',
    )
    .action(async (options: StatusOptions) => {
      const intervalMs = positiveNumber(options.interval, '--interval') * 1000;
      const windowMs = positiveNumber(options.minutes, '--minutes') * 60_000;
      const count = options.count === undefined ? undefined : positiveNumber(options.count, '--count');
      await withStack(options, async (aws, stack) => {
        if (!options.watch) {
          const report = await collectStatus(aws, stack, options.outcomes);
          process.stdout.write(options.json ? `${JSON.stringify(report, null, 2)}\n` : renderStatus(report));
          return;
        }
        await watch(aws, stack, options, { intervalMs, windowMs, count });
      });
    });
}

function positiveNumber(raw: string, flag: string): number {
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0)
    throw new CliError(`${flag} must be a positive number, got "${raw}"`, EXIT.usage);
  return n;
}

export async function collectStatus(
  aws: AwsContext,
  stack: ThreadgateStack,
  countOutcomes: boolean,
): Promise<StatusReport> {
  const control = pipelineControl(aws, stack);
  const worker = output(stack, 'WorkerFunctionName');
  const warnings: string[] = [];
  const failuresUrl = stack.outputs.OutcomeFailuresQueueUrl;
  const [reading, queue, dlq, plan, scanned, failures, shape] = await Promise.all([
    readCap({ lambda: aws.clients.lambda, control, workerFunctionName: worker }),
    queueCounts(aws, output(stack, 'QueueUrl')),
    queueCounts(aws, output(stack, 'DlqUrl')),
    planStatus(aws, stack),
    countOutcomes ? scanOutcomes(aws, output(stack, 'TableName')) : Promise.resolve(null),
    failuresUrl ? queueCounts(aws, failuresUrl) : Promise.resolve(null),
    // With lanes (the worker's LANES), the shape published, or the first one until then.
    workerEnvironment(aws, stack).then((env) => pipelineControl(aws, stack, env).readShape()),
  ]);
  const { mapping, state } = reading;
  const reserved = reading.knobs.reservedConcurrency ?? null;
  const maximum = reading.knobs.mappingMaximum ?? null;
  // Shown under the pipeline line (and as pipeline.mismatch in --json), not again as a warning.
  const mismatch = pipelineMismatch(state, mapping);
  const outcomes = scanned?.counts ?? null;
  const outcomeUnknown = outcomes ? (outcomes[OUTCOME_UNKNOWN] ?? 0) : null;
  if (outcomes) delete outcomes[OUTCOME_UNKNOWN];
  if (outcomeUnknown) {
    warnings.push(
      `${outcomeUnknown} record${outcomeUnknown === 1 ? '' : 's'} failed ${OUTCOME_UNKNOWN}: the form may have taken ${outcomeUnknown === 1 ? 'it' : 'them'} although the answer was lost; ` +
        `check each at the target and reconcile by hand (\`threadgate outcomes --reason ${OUTCOME_UNKNOWN}\` lists them; docs/outcomes.md)`,
    );
  }
  if (failures && failures.visible + failures.notVisible > 0) {
    warnings.push(
      `${failures.visible + failures.notVisible} outcome stream record(s) could not be published and are in the failure queue: their outcomes are in the table but not on the outcomes queue (docs/outcomes.md says how to publish them again)`,
    );
  }
  if (reserved === null) {
    warnings.push(
      'the worker has no reserved concurrency; only the mapping maximum limits in flight (account minimum of 100 unreserved?)',
    );
  }
  return {
    stack: stack.name,
    at: new Date().toISOString(),
    resources: {
      queueUrl: output(stack, 'QueueUrl'),
      dlqUrl: output(stack, 'DlqUrl'),
      tableName: output(stack, 'TableName'),
    },
    pipeline: {
      enabled: mapping.enabled,
      mappingState: mapping.state,
      mappingUuid: mapping.uuid,
      paused: state.paused,
      reason: state.reason,
      code: state.code,
      since: state.since,
      by: state.by,
      mismatch,
    },
    cap: shape && reading.cap !== undefined ? solvesInForce(reading.cap, shape) : (reading.cap ?? null),
    lanes: shape
      ? {
          invocations: reading.cap ?? null,
          lanesPerInvocation: shape.L,
          ...(shape.drain && Date.now() < shape.drain.until ? { olderInvocationsLanes: shape.drain.L } : {}),
          busy: 'error' in plan ? null : plan.workingThreads,
        }
      : null,
    reservedConcurrency: reserved,
    mappingMaximumConcurrency: maximum,
    batchSize: mapping.batchSize ?? null,
    plan,
    queue: { depth: queue.visible, inFlight: queue.notVisible, delayed: queue.delayed },
    dlq: { depth: dlq.visible, inFlight: dlq.notVisible },
    outcomeFailures:
      failures && failuresUrl
        ? { queueUrl: failuresUrl, depth: failures.visible, inFlight: failures.notVisible }
        : null,
    outcomes,
    outcomeUnknown,
    cancelledBatches: scanned?.cancels ?? null,
    warnings,
  };
}

/**
 * The recorded pipeline state and the mapping disagree: a pause whose mapping update failed
 * (or a mapping enabled by hand) leaves workers taking jobs under a recorded pause; a resume
 * whose mapping update failed (or a pause whose state write failed, or a mapping disabled by
 * hand) leaves nothing polled with no pause recorded. A pause or resume under way shows this
 * for a moment; one that stays needs the command named in `fix`.
 */
export function pipelineMismatch(
  state: { paused: boolean; reason?: string },
  mapping: { enabled: boolean; state: string },
): PipelineMismatch | null {
  if (state.paused && mapping.enabled) {
    const reason = JSON.stringify(state.reason ?? 'paused by operator');
    return {
      kind: 'paused_but_mapping_enabled',
      message: `the recorded pipeline state says paused but the mapping is ${mapping.state}: workers keep taking jobs`,
      fix: `\`threadgate pause --reason ${reason}\` disables the mapping and keeps the pause (or \`threadgate resume\` once its cause is fixed)`,
    };
  }
  if (!state.paused && !mapping.enabled) {
    return {
      kind: 'mapping_disabled_but_not_paused',
      message: `the mapping is ${mapping.state} but no pause is recorded: nothing is polled and nothing says why`,
      fix: '`threadgate resume` enables it (after checking threadsinfo), or `threadgate pause --reason TEXT` records why it stays off',
    };
  }
  return null;
}

/** A queue's visible, in-flight and delayed message counts (also `threadgate wait`'s idle check). */
export async function queueCounts(aws: AwsContext, queueUrl: string) {
  const out = await aws.clients.sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: [
        'ApproximateNumberOfMessages',
        'ApproximateNumberOfMessagesNotVisible',
        'ApproximateNumberOfMessagesDelayed',
      ],
    }),
  );
  const a = out.Attributes ?? {};
  return {
    visible: Number(a.ApproximateNumberOfMessages ?? 0),
    notVisible: Number(a.ApproximateNumberOfMessagesNotVisible ?? 0),
    delayed: Number(a.ApproximateNumberOfMessagesDelayed ?? 0),
  };
}

/** threadsinfo with the stored key; a failure is reported in the status, not thrown. */
async function planStatus(aws: AwsContext, stack: ThreadgateStack): Promise<StatusReport['plan']> {
  try {
    const access = await captchaAiAccess(aws, stack);
    const info = await (await access.client()).threadsInfo();
    const settings = await adjusterCapSettings(aws, stack);
    return {
      threads: info.threads,
      workingThreads: info.workingThreads,
      reserve: settings?.reserve ?? null,
      minCap: settings?.minCap ?? null,
      maxCap: settings?.maxCap ?? null,
      targetCap: settings ? computeCap(info.threads, settings) : null,
      clampedByMaxCap: (settings && maxCapClamp(info.threads, settings)) ?? null,
    };
  } catch (err) {
    return { error: err instanceof Error ? err.message : String(err) };
  }
}

/** The cap settings the adjuster runs with, parsed from its environment as the adjuster parses them. */
async function adjusterCapSettings(aws: AwsContext, stack: ThreadgateStack): Promise<CapSettings | null> {
  const name = stack.outputs.AdjusterFunctionName;
  if (!name) return null;
  try {
    const out = await aws.clients.lambda.send(new GetFunctionConfigurationCommand({ FunctionName: name }));
    return readCapSettings(out.Environment?.Variables ?? {});
  } catch {
    return null;
  }
}

/**
 * Rows by status, and under OUTCOME_UNKNOWN the `failed` rows with that reason (taken out by the
 * caller); and the batch cancels, items of the same table (functions/records/cancellations.ts).
 */
async function scanOutcomes(
  aws: AwsContext,
  table: string,
): Promise<{ counts: Record<string, number>; cancels: BatchCancel[] }> {
  const counts: Record<string, number> = Object.fromEntries(OUTCOME_STATUSES.map((s) => [s, 0]));
  counts[OUTCOME_UNKNOWN] = 0;
  const cancels: BatchCancel[] = [];
  const pages = paginateScan(
    { client: aws.clients.documents },
    {
      TableName: table,
      ProjectionExpression:
        '#status, #reason, record_key, cancelled_batch, cancel_reason, cancelled_at, cancelled_by',
      ExpressionAttributeNames: { '#status': 'status', '#reason': 'reason' },
    },
  );
  for await (const page of pages) {
    for (const item of page.Items ?? []) {
      if (isCancelKey(item.record_key)) {
        const cancel = cancelFrom(item);
        if (cancel) cancels.push(cancel);
        continue;
      }
      const s = typeof item.status === 'string' ? item.status : 'unknown';
      counts[s] = (counts[s] ?? 0) + 1;
      if (s === 'failed' && item.reason === OUTCOME_UNKNOWN)
        counts[OUTCOME_UNKNOWN] = (counts[OUTCOME_UNKNOWN] ?? 0) + 1;
    }
  }
  cancels.sort((a, b) => a.cancelledAt.localeCompare(b.cancelledAt));
  return { counts, cancels };
}

export function renderStatus(r: StatusReport): string {
  const lines: string[] = [];
  const p = r.pipeline;
  const running = p.enabled && !p.paused ? 'running' : p.paused ? 'PAUSED' : 'STOPPED (mapping disabled)';
  lines.push(`stack        ${r.stack}`);
  lines.push(`pipeline     ${running} (mapping ${p.mappingState})`);
  if (p.mismatch) {
    lines.push(`  MISMATCH   ${p.mismatch.message}`);
    lines.push(`  to fix     ${p.mismatch.fix}`);
  }
  if (p.paused || p.reason) {
    const detail = [p.code, p.by && `by ${p.by}`, p.since && `since ${p.since}`].filter(Boolean).join(', ');
    lines.push(`  reason     ${p.reason ?? '(none recorded)'}${detail ? ` [${detail}]` : ''}`);
  }
  lines.push(
    `cap          ${r.cap ?? 'none'}${p.enabled && !p.paused ? '' : ' while paused'} (reserved concurrency ${r.reservedConcurrency ?? 'none'}, mapping maximum ${
      r.mappingMaximumConcurrency ?? 'none'
    }, batch size ${r.batchSize ?? '?'})`,
  );
  if (r.lanes) {
    const older =
      r.lanes.olderInvocationsLanes === undefined
        ? ''
        : ` (invocations started before the cap fell: ${r.lanes.olderInvocationsLanes})`;
    const busy = r.lanes.busy === null ? '' : `; ${r.lanes.busy} threads working at CaptchaAI`;
    lines.push(
      `lanes        ${r.lanes.invocations ?? 'any'} invocations × ${r.lanes.lanesPerInvocation} lanes${older}${busy}`,
    );
  }
  if ('error' in r.plan) lines.push(`plan         unavailable: ${r.plan.error}`);
  else {
    const target =
      r.plan.targetCap === null
        ? ''
        : `; target cap ${r.plan.targetCap} (${r.plan.threads} − reserve ${r.plan.reserve}, within ${r.plan.minCap}–${r.plan.maxCap})`;
    lines.push(`plan         ${r.plan.threads} threads, ${r.plan.workingThreads} working${target}`);
    if (r.plan.clampedByMaxCap) lines.push(`  clamped by maxCap: ${describeClamp(r.plan.clampedByMaxCap)}`);
  }
  lines.push(
    `queue        ${r.queue.depth} waiting, ${r.queue.inFlight} in flight${r.queue.delayed ? `, ${r.queue.delayed} delayed` : ''}`,
  );
  lines.push(`dlq          ${r.dlq.depth} waiting${r.dlq.inFlight ? `, ${r.dlq.inFlight} in flight` : ''}`);
  if (r.outcomeFailures) {
    const f = r.outcomeFailures;
    lines.push(
      `stream       ${f.depth} record${f.depth === 1 ? '' : 's'} not published (failure queue)${f.inFlight ? `, ${f.inFlight} in flight` : ''}`,
    );
  }
  if (r.outcomes) {
    const total = Object.values(r.outcomes).reduce((a, b) => a + b, 0);
    const parts = Object.entries(r.outcomes).map(([s, n]) =>
      s === 'failed' && r.outcomeUnknown ? `${s} ${n} (${OUTCOME_UNKNOWN} ${r.outcomeUnknown})` : `${s} ${n}`,
    );
    lines.push(`outcomes     ${total} rows: ${parts.join(', ')}`);
  }
  if (r.cancelledBatches?.length) {
    lines.push(
      `cancelled    ${r.cancelledBatches.length} batch${r.cancelledBatches.length === 1 ? '' : 'es'}:`,
    );
    for (const c of r.cancelledBatches) {
      lines.push(
        `  ${c.batchId}  at ${c.cancelledAt}${c.by ? ` by ${c.by}` : ''}${c.reason ? `: ${c.reason}` : ''}`,
      );
    }
  }
  for (const w of r.warnings) lines.push(`warning: ${w}`);
  return `${lines.join('\n')}\n`;
}

async function watch(
  aws: AwsContext,
  stack: ThreadgateStack,
  options: StatusOptions,
  o: { intervalMs: number; windowMs: number; count: number | undefined },
): Promise<void> {
  const samples: ChartSample[] = [];
  const tty = process.stdout.isTTY === true && !options.json;
  let stop = false;
  let wake: (() => void) | undefined;
  const onSignal = () => {
    stop = true;
    wake?.();
  };
  process.once('SIGINT', onSignal);
  try {
    for (let i = 0; !stop && (o.count === undefined || i < o.count); i++) {
      if (i > 0) {
        // Ctrl-C ends the wait at once rather than after the interval.
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, o.intervalMs);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
      if (stop) break;
      const report = await collectStatus(aws, stack, options.outcomes);
      const now = Date.now();
      samples.push({
        at: now,
        inFlight: report.queue.inFlight,
        cap: report.cap,
      });
      while (samples.length && (samples[0]?.at ?? now) < now - o.windowMs) samples.shift();
      if (options.json) {
        process.stdout.write(`${JSON.stringify(report)}\n`);
        continue;
      }
      const width = Math.max(20, Math.min(80, (process.stdout.columns ?? 80) - 10));
      const screen = `${renderStatus(report)}\n${renderChart(samples, { now, windowMs: o.windowMs, width })}`;
      // On a terminal redraw in place; in a pipe or log, print each refresh after the last.
      process.stdout.write(
        tty
          ? `\x1b[H\x1b[2J${screen}(refresh every ${o.intervalMs / 1000}s, Ctrl-C to stop)\n`
          : `${screen}\n`,
      );
    }
  } finally {
    process.off('SIGINT', onSignal);
  }
}
