import { randomUUID } from 'node:crypto';
import type { Logger } from '@aws-lambda-powertools/logger';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import type { SQSRecord } from 'aws-lambda';
import { scaledTokenLifetimeMs } from '../captchaai/timings.js';
import { freshSolveBudget, type SolveResult } from '../captchaai/types.js';
import {
  CaptchaError,
  DnsUnavailableError,
  InvalidJobError,
  InvocationEndingError,
  LaneStoppedError,
  TargetError,
} from '../common/errors.js';
import { BatchCancelledError } from '../records/cancellations.js';
import { claimOwner } from '../records/claim-owner.js';
import {
  type DecisionContext,
  decideCancelled,
  decideClaimConflict,
  decideFinalWriteLost,
  decideOutcome,
  decidePriorPhase,
  decideTargetResponse,
  type PriorPhase,
} from '../records/decisions.js';
import { needsBody } from '../records/form-verdict.js';
import {
  captchaTaskOf,
  captchaTypeOf,
  type Job,
  tokenFieldOf,
  validateJobMessage,
} from '../records/job-schema.js';
import type { ClaimResult, WriteResult } from '../records/store.js';
import { checkTargetUrl } from '../target/allowlist.js';
import { TargetSession } from '../target/session.js';
import { taskDeadlineMs } from './config.js';
import { applyCrash, applyDecision, finished } from './effects.js';
import { errorSummary, type ProcessOptions, type RecordResult, type WorkerDeps } from './types.js';

/**
 * The record flow, for one SQS record:
 *   validate → allowlist/DNS → claim (lease) → submit the CAPTCHA task → GET page while
 *   CaptchaAI works → answer → POST token in the same session → final outcome (conditional on
 *   still holding the claim).
 * The page loads while the task is solved, so the plan's thread is busy while the slot works; a
 * page that fails to load still waits for the task's answer (or the client's deadline, then the
 * cool-down), because the slot is released only once the task no longer holds a thread.
 * Errors become outcomes in one place: functions/records/decisions.ts; ./effects.ts
 * carries the decision out. Never logs or stores a token or the API key.
 */

function receiveCountOf(record: SQSRecord): number {
  const n = Number(record.attributes?.ApproximateReceiveCount);
  return Number.isFinite(n) && n > 0 ? n : 1;
}

type TimingField = 'claim_ms' | 'target_ms' | 'solve_ms' | 'finish_ms' | 'page_ms';

/**
 * Wall-clock time of a record's parts, for the final log line (the benchmark reads them to
 * tell the time outside the solve and the target's HTTP apart). A monotonic clock, not `now`,
 * so tests that fake the clock are unaffected. page_ms is the page load, which runs during the
 * solve; target_ms is the target time outside the solve: the POST, plus any part of the page
 * load that outlasted the solve.
 */
class RecordTiming {
  private readonly started = performance.now();
  private readonly spent: Partial<Record<TimingField, number>> = {};

  async time<T>(field: TimingField, work: () => Promise<T>): Promise<T> {
    const start = performance.now();
    try {
      return await work();
    } finally {
      this.spent[field] = (this.spent[field] ?? 0) + (performance.now() - start);
    }
  }

  fields(): Record<string, number> {
    const out: Record<string, number> = { total_ms: Math.round(performance.now() - this.started) };
    for (const [field, ms] of Object.entries(this.spent)) out[field] = Math.round(ms);
    return out;
  }
}

/** Checks pageurl and submit_url against the allowlist (and DNS); a refusal is invalid input. */
async function checkJobHosts(job: Job, deps: WorkerDeps): Promise<void> {
  for (const field of ['pageurl', 'submit_url'] as const) {
    try {
      await checkTargetUrl(job[field], deps.config.allowlist, deps.resolver);
    } catch (err) {
      if (err instanceof TargetError) {
        throw new InvalidJobError(`${field}: ${err.message}`, job.record_key, { cause: err });
      }
      throw err;
    }
  }
}

/**
 * Works one SQS record to its end. Never throws for a record-level problem: every error
 * becomes a RecordResult through decideOutcome.
 */
export async function processRecord(
  record: SQSRecord,
  deps: WorkerDeps,
  options: ProcessOptions = {},
): Promise<RecordResult> {
  const { config, store, logger } = deps;
  const timing = new RecordTiming();
  const receiveCount = receiveCountOf(record);
  const log = logger.createChild({ persistentKeys: { messageId: record.messageId, receiveCount } });
  const ctx = {
    receiveCount,
    transientReceiveLimit: config.transientReceiveLimit,
    cooldownMs: config.cooldownMs,
  };
  const validation = validateJobMessage(record.body);
  if (!validation.ok) {
    const invalid = new InvalidJobError(validation.reason, validation.recordKey);
    return applyDecision(decideOutcome(invalid, ctx), { record, deps, log });
  }
  const job = validation.job;
  const captchaType = captchaTypeOf(job);
  log.appendKeys({ recordKey: job.record_key, captchaType });

  try {
    await checkJobHosts(job, deps);
  } catch (err) {
    return applyDecision(decideOutcome(err, ctx), { record, deps, log });
  }

  const owner = deps.newOwner?.() ?? claimOwner(record.messageId, receiveCount, randomUUID());
  let claim: ClaimResult;
  try {
    claim = await timing.time('claim_ms', () =>
      store.claim(job.record_key, {
        owner,
        leaseMs: config.leaseMs,
        captchaType,
        ...(job.batch_id === undefined ? {} : { batchId: job.batch_id }),
        receive: { messageId: record.messageId, count: receiveCount },
      }),
    );
  } catch (err) {
    // Every try threw, and one may have landed: the row tells (decideCrash, ./effects.ts applyCrash).
    return applyCrash(err, { record, deps, log, owner, recordKey: job.record_key });
  }
  if (!claim.claimed) {
    const conflict = deps.metrics.singleMetric();
    conflict.addDimension('reason', claim.why);
    conflict.addMetric('ClaimConflicts', MetricUnit.Count, 1);
    log.info('record already claimed; not solving', {
      claimConflict: claim.why,
      existingStatus: claim.row?.status,
    });
    const copy = { ...ctx, messageId: record.messageId, leaseOwner: claim.row?.lease_owner };
    const decision = decideClaimConflict(claim.why, claim.row?.lease_expires_at, copy);
    return applyDecision(decision, { record, deps, log });
  }

  // The row's batch, not the message's: a record sent again under another batch keeps its first
  // row and batch (store.ts), so its first batch's cancel is the one that holds it.
  const batchId = claim.previous?.batch_id ?? job.batch_id;
  return workClaim({
    record,
    deps,
    options,
    job,
    owner,
    claim,
    batchId,
    posting: { marked: false },
    timing,
    log,
    ctx,
  });
}

/**
 * The task markers of one claim, written in order as in.php answers (functions/records/store.ts
 * markSubmitted). `counted`: the in.php calls they have added to the row's attempts.
 */
class TaskMarkers {
  counted = 0;
  #chain: Promise<void> = Promise.resolve();

  constructor(private readonly w: Pick<ClaimWork, 'deps' | 'job' | 'owner' | 'log'>) {}

  record(taskId: string, submits: number): void {
    const { deps, job, owner, log } = this.w;
    const submittedAt = deps.now();
    this.#chain = this.#chain.then(async () => {
      const uncounted = submits - this.counted;
      try {
        const written = await deps.store.markSubmitted(job.record_key, owner, {
          taskId,
          submittedAt,
          attempts: uncounted,
        });
        if (written.written) this.counted += uncounted;
      } catch (err) {
        // Not fatal: the lease alone still keeps a redelivery from submitting while it is live.
        log.warn('could not record the task on the row', errorSummary(err));
      }
    });
  }

  /** Resolves once every marker write so far has ended (never rejects). */
  settled(): Promise<void> {
    return this.#chain;
  }
}

interface ClaimWork {
  record: SQSRecord;
  deps: WorkerDeps;
  options: ProcessOptions;
  job: Job;
  owner: string;
  claim: Extract<ClaimResult, { claimed: true }>;
  /** The batch the record's row belongs to (the first one it was claimed or rejected under). */
  batchId: string | undefined;
  /** Set once the posting marker is written: from then on the form may have the record. */
  posting: { marked: boolean };
  timing: RecordTiming;
  log: Logger;
  ctx: DecisionContext;
}

/**
 * The claimed record: what an earlier claim left on the row first (decidePriorPhase), then page
 * load and solve, the posting marker, the POST and the final write. The task marker is written
 * as soon as in.php answers, the posting marker before the POST: a worker that takes the lease
 * over later resumes that task, or ends the record OUTCOME_UNKNOWN instead of posting again.
 */
async function workClaim(w: ClaimWork): Promise<RecordResult> {
  const { deps, job, log, timing, options } = w;
  const { config } = deps;
  const effects = claimEffects(w);
  const captchaType = captchaTypeOf(job);
  const prior = decidePriorPhase(w.claim.previous, {
    now: deps.now(),
    deadlineMs: taskDeadlineMs(config),
    cooldownMs: config.cooldownMs,
  });
  if (prior.kind === 'posted') {
    log.warn('an earlier claim was posting this record when it ended; it is not posted again', {
      postingAt: w.claim.previous?.posting_at,
    });
    return applyDecision(prior.decision, { ...effects, attempts: 0 });
  }
  let attempts = 0;
  const markers = new TaskMarkers(w);
  // Spent by every solve call; read back on an error of ours. A release with the UNSOLVABLE resubmission due leaves that one task.
  const budget = { ...freshSolveBudget(), resubmitted: w.claim.previous?.resubmission_due_at !== undefined };
  try {
    await beforeNewTask(w, prior);
    const session = new TargetSession({
      allowlist: config.allowlist,
      resolver: deps.resolver,
      timeoutMs: config.targetTimeoutMs,
      dispatcher: deps.dispatcher,
      signal: options.signal,
    });
    const solver = await deps.solver();
    let page: Promise<unknown> | undefined;
    const loadPage = () => {
      page ??= timing.time('page_ms', () => session.load(job.pageurl));
      // Settled below, after the solve: an early failure must not be an unhandled rejection.
      page.catch(() => undefined);
    };
    const onSubmitted = (taskId: string, submits: number) => {
      loadPage();
      markers.record(taskId, submits);
    };
    if (prior.kind === 'resume') {
      log.info('resuming the task an earlier claim submitted', { taskId: prior.taskId });
      loadPage();
    }
    let solved: Awaited<ReturnType<typeof solver.solve>>;
    try {
      solved = await timing.time('solve_ms', () =>
        solver.solve(captchaTaskOf(job), {
          signal: options.signal,
          onSubmitted,
          budget,
          // Every in.php of the solve asks the batch's cancel first (the first, retries, the
          // UNSOLVABLE resubmission, the repeat after a key rotation, one after a resumed task).
          beforeSubmit: () => beforeEachSubmit(w, options),
          ...(prior.kind === 'resume' ? { resume: prior } : {}),
        }),
      );
    } catch (err) {
      // The solve's error decides the outcome (a poll timeout brings the cool-down); the page
      // load, if any, is only let finish so no request outlives the record.
      await page?.catch(() => undefined);
      throw err;
    }
    attempts = solved.submits;
    options.onAnswered?.();
    // The task is answered, so its thread is free: a failed page load may now end the record.
    loadPage();
    await timing.time('target_ms', () => page as Promise<unknown>);
    noteSolved(w, solved);

    const lifetimeMs = scaledTokenLifetimeMs(captchaType, config.timeScale);
    if (deps.now() - solved.solvedAt > lifetimeMs) {
      throw new TargetError('TOKEN_EXPIRED', `the token is older than its ${lifetimeMs} ms lifetime`);
    }
    await markers.settled();
    const notPosted = await endIfCancelled(w, attempts - markers.counted);
    return notPosted ?? (await postAndFinish(w, session, solved, attempts - markers.counted));
  } catch (err) {
    // A solve ended by its beforeSubmit (a cancel, an unknown cancel) left its count in the budget.
    attempts =
      err instanceof CaptchaError && err.submits !== undefined
        ? err.submits
        : Math.max(attempts, budget.submits);
    await markers.settled();
    const aborted = options.signal?.aborted === true;
    if (aborted) {
      log.warn(
        'invocation ending mid-record; the lease keeps the record until it expires',
        errorSummary(err),
      );
    } else {
      log.info('record failed', errorSummary(err));
    }
    return applyDecision(decideOutcome(err, { ...w.ctx, aborted, posting: w.posting.marked }), {
      ...effects,
      attempts: attempts - markers.counted,
      resubmitted: budget.resubmitted,
    });
  }
}

/** What the effects of a claimed record's decision need (./effects.ts). */
function claimEffects(w: ClaimWork) {
  return {
    record: w.record,
    deps: w.deps,
    log: w.log,
    owner: w.owner,
    recordKey: w.job.record_key,
    leaseExpiresAt: w.claim.leaseExpiresAt,
  };
}

/**
 * The posting marker, the POST and the final write. From the posting marker on no later claim
 * posts the record again; not written (the claim is lost), no POST. `attempts`: in.php calls not
 * yet counted on the row.
 */
async function postAndFinish(
  w: ClaimWork,
  session: TargetSession,
  solved: SolveResult,
  attempts: number,
): Promise<RecordResult> {
  const { deps, job, owner, log, timing } = w;
  const { store } = deps;
  const effects = { record: w.record, deps, log, owner, recordKey: job.record_key };
  // From the posting marker on, no later claim posts this record again. Not written: no POST.
  const posting = await timing.time('finish_ms', () => store.markPosting(job.record_key, owner));
  if (!posting.written) return finished(false, 'in_progress', deps, log);
  w.posting.marked = true;
  const fields: Record<string, string> = { ...job.form, [tokenFieldOf(job)]: solved.token };
  // The form's verdict: the job's `expect`, else the stack's (functions/records/form-verdict.ts).
  const expect = job.expect ?? deps.config.formExpect;
  const posted = await timing
    .time('target_ms', () =>
      session.submit(job.submit_url, fields, {
        idempotencyKey: job.record_key,
        ...(expect ? { verdict: { body: needsBody(expect) } } : {}),
      }),
    )
    .catch(async (err: unknown) => {
      // The resolver failed before a connection was opened: the form never got the POST, so the
      // marker goes and the record is retried like a page load that met a DNS hiccup.
      if (err instanceof DnsUnavailableError) await takePostingBack(w);
      throw err;
    });
  const { status, reason, rule } = decideTargetResponse(posted.status, expect && { expect, answer: posted });
  const verdict = rule === undefined ? {} : { reason, expectRule: rule };
  let written: WriteResult;
  try {
    written = await timing.time('finish_ms', () =>
      store.finish(job.record_key, owner, {
        status,
        reason,
        targetStatus: posted.status,
        attempts,
        solveMs: solved.solveMs,
        ...(rule === undefined ? {} : { expectRule: rule }),
      }),
    );
  } catch (err) {
    log.error('the final write failed on every try; the posting marker keeps the record from a second POST', {
      status,
      targetStatus: posted.status,
      ...errorSummary(err),
    });
    return applyDecision(decideFinalWriteLost(w.claim.leaseExpiresAt), effects);
  }
  return finished(written.written, status, deps, log, {
    ...verdict,
    targetStatus: posted.status,
    polls: solved.polls,
    ...timing.fields(),
  });
}

/** Removes the posting marker of a POST that was never sent; kept (the record then ends final) when that fails. */
async function takePostingBack(w: ClaimWork): Promise<void> {
  try {
    const out = await w.deps.store.unmarkPosting(w.job.record_key, w.owner);
    if (out.written) w.posting.marked = false;
  } catch (err) {
    w.log.warn('could not take the posting marker back; the record is not posted again', errorSummary(err));
  }
}

/**
 * Before a new task: an earlier claim's task that may still hold a thread keeps this slot until it
 * must be done. The batch's cancel is asked before each in.php (beforeSubmit), so a task an
 * earlier claim left within its deadline is polled to its end, and the check before the POST (or
 * before a resubmission) ends the record.
 */
async function beforeNewTask(w: ClaimWork, prior: PriorPhase): Promise<void> {
  if (prior.kind === 'wait') {
    w.log.info('an earlier task of this record may hold a thread; holding the slot', { until: prior.until });
    await w.deps.sleep(prior.until - w.deps.now(), w.options.signal);
  }
}

/**
 * The cancel of the record's batch as this environment knows it (read again when older than the
 * bound, ./cancel-watch.ts). Rejects with CancelUnknownError when no read succeeded within the
 * bound: the caller sends nothing then (decisions.ts releases the claim for a later try).
 */
function cancelOfRecord(w: ClaimWork) {
  return w.batchId === undefined ? Promise.resolve(undefined) : w.deps.cancels?.cancelOf(w.batchId);
}

/** Before an in.php: a cancelled batch (or an unknown cancel) ends the solve without the call. */
/** The solve's metrics and log line (never its token). */
function noteSolved(w: ClaimWork, solved: SolveResult): void {
  w.deps.metrics.addMetric('Solves', MetricUnit.Count, 1);
  w.deps.metrics.addMetric('SolveTime', MetricUnit.Milliseconds, solved.solveMs);
  w.deps.metrics.addMetric('ResPhpCalls', MetricUnit.Count, solved.polls);
  w.log.info('solved', {
    taskId: solved.taskId,
    submits: solved.submits,
    polls: solved.polls,
    solveMs: solved.solveMs,
  });
}

/**
 * Asked before every in.php of a record: with lanes, a stop another lane met (or a paused state)
 * ends it first (LaneStoppedError), and so does an invocation too near its end for the shortest
 * work from this call on (InvocationEndingError, ./chain-window.ts); then the batch's cancel
 * (throwIfCancelled).
 */
async function beforeEachSubmit(w: ClaimWork, options: ProcessOptions): Promise<void> {
  if (options.stopping?.()) throw new LaneStoppedError('the invocation is stopping');
  if (options.submitFits && !options.submitFits()) {
    throw new InvocationEndingError('too little of the invocation is left for a task; back to the queue');
  }
  await throwIfCancelled(w);
}

async function throwIfCancelled(w: ClaimWork): Promise<void> {
  const cancel = await cancelOfRecord(w);
  if (cancel) throw new BatchCancelledError(cancel);
}

/**
 * Before the POST, the token in hand: ends the record `cancelled` when its batch is cancelled (the
 * solve is wasted), with `solvedAttempts` in.php calls not yet counted on the row. An unknown
 * cancel throws (CancelUnknownError): not posted, the claim released for a later try.
 */
async function endIfCancelled(w: ClaimWork, solvedAttempts: number): Promise<RecordResult | undefined> {
  const { deps, job, log } = w;
  const cancel = await cancelOfRecord(w);
  if (!cancel) return undefined;
  log.info('the batch was cancelled while the record was solved; not posted');
  return applyDecision(decideCancelled(cancel, true), {
    record: w.record,
    deps,
    log,
    owner: w.owner,
    recordKey: job.record_key,
    attempts: solvedAttempts,
  });
}
