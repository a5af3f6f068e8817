import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { SendMessageBatchCommand } from '@aws-sdk/client-sqs';
import seedrandom from 'seedrandom';
import { DEFAULT_TIMINGS } from '../../functions/captchaai/timings.js';
import { DEFAULTS } from '../../functions/common/settings.js';
import { capCeiling, computeCap } from '../../functions/pipeline/cap-policy.js';
import { STATE_ITEM_KEY } from '../../functions/pipeline/state-item.js';
import { isFinalStatus } from '../../functions/records/store.js';
import { cancelRefreshMs } from '../../functions/worker/cancel-watch.js';
import { REPO_ROOT } from '../emulator/deploy.js';
import {
  type AwsFaultRule,
  type AwsFaultRuleState,
  addAwsFaults,
  awsFaults,
} from '../emulator/fault-client.js';
import { type RuntimeProcess, spawnRuntimeProcess } from '../runtime/child-process.js';
import {
  type LocalStack,
  localCooldownMs,
  localRuntimeOptions,
  startLocalStack,
} from '../stack/local-stack.js';
import {
  deployedWorker,
  queueDepth,
  readDlq,
  readOutcomes,
  readOutcomesOf,
  STATUS_FIELDS,
} from '../stack/observation.js';
import { expectedOutcomes, generatedRecords } from '../stack/records.js';
import { everyRecordFinished, feedQueue, progressOf } from '../stack/run.js';
import { type DeployedWorker, describeWorker } from '../stack/worker-shape.js';
import { DnsStandin } from '../standins/dns.js';
import { type ChaosVerdict, checkChaos } from './check.js';
import { cancelBatch, type KeyRotation, poisonSolveTimes, rotateKey, superviseRotation } from './operator.js';
import { type ChaosOptions, type FaultCounts, finalWriteFaults, timeoutWriteFaults } from './plan.js';

/**
 * The chaos run: N records through the local stack while faults are drawn at random (seeded)
 * on the wire — in.php answers lost after the task was created (a 502 page, a dropped
 * connection, an answer after the client's timeout), form POSTs taken and their answers
 * dropped, DynamoDB writes throttled and final writes failing (a few times, or for good), tasks
 * never answered whose `failed` write then fails, the pipeline state's reads throttled, the API
 * key rotated mid-run, crafted SolveTimes items in the table, one of two batches cancelled
 * mid-run while reads of its cancel fail, the target's name failing at the DNS stand-in for
 * seconds at a time, the DLQ's sends failing — and the runtime process is
 * SIGKILLed and restarted now and then, the producers sending the unfinished records again. Afterwards the checker (./check.ts) judges the stand-ins' own logs.
 */
export interface ChaosResult extends ChaosVerdict {
  seed: number;
  /** The worker as deployed: its memory, the lanes setting, r and L. */
  worker: DeployedWorker;
  faults: FaultCounts;
  elapsedS: number;
  deployS: number;
  logDir: string;
  /** The run stopped at its time bound before every record ended. */
  timedOut: boolean;
}

/** The stand-in's tokens (local/standins/captchaai/http.ts makeToken). */
const TOKEN_PATTERN = /0\.[\w-]{100,}|03A[\w-]{100,}/;

function logsOf(dir: string): string {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => readFileSync(join(entry.parentPath, entry.name), 'utf8'))
    .join('\n');
}

async function sendAgain(stack: LocalStack, bodies: string[]): Promise<void> {
  for (let i = 0; i < bodies.length; i += 10) {
    await stack.sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: stack.outputs.QueueUrl,
        Entries: bodies.slice(i, i + 10).map((body, n) => ({ Id: String(n), MessageBody: body })),
      }),
    );
  }
}

/** The target's host name the workers resolve through the DNS stand-in (with `dnsOutage`). */
const TARGET_NAME = 'chaos-form.dns.test';

/** The stateThrottle rule: GetItem of the state item (a cancel read is a GetItem of the outcomes table). */
const isStateRead = (r: AwsFaultRuleState) => r.operation === 'GetItem' && r.key?.pk === STATE_ITEM_KEY.pk;

/** The two interleaved batches of a run with `cancelMidRun`: the second is cancelled. */
function batchesOf(seed: number): { kept: string; cancelled: string } {
  return { kept: `chaos-${seed}-kept`, cancelled: `chaos-${seed}-cancelled` };
}

/** The emulator rules of the new kinds: reads of the cancel items and the DLQ's sends fail at a rate. */
function controlPathFaults(stack: LocalStack, o: ChaosOptions): AwsFaultRule[] {
  const rules: AwsFaultRule[] = [];
  if ((o.rates.cancelReadFails ?? 0) > 0) {
    rules.push({
      operation: 'GetItem',
      service: 'dynamodb',
      contains: ['cancelled batch '],
      rate: o.rates.cancelReadFails ?? 0,
      seed: `${o.seed}-cancel-read`,
      error: 'ProvisionedThroughputExceededException',
    });
  }
  if ((o.rates.dlqSendFails ?? 0) > 0) {
    rules.push({
      operation: 'SendMessage',
      service: 'sqs',
      contains: [stack.outputs.DlqUrl.split('/').pop() ?? 'dlq'],
      rate: o.rates.dlqSendFails ?? 0,
      seed: `${o.seed}-dlq-send`,
      error: 'InternalError',
      status: 500,
    });
  }
  return rules;
}

/**
 * DNS outages: the target's name answers SERVFAIL for 0.5–2 s at a time, `share` of the time in
 * all (seeded), until the signal aborts. Resolves with the number of outages.
 */
async function dnsOutages(
  dns: DnsStandin,
  share: number,
  seed: number,
  signal: AbortSignal,
): Promise<number> {
  const random = seedrandom(`${seed}-dns`);
  let outages = 0;
  const pause = (ms: number) =>
    sleep(ms, undefined, { signal }).then(
      () => !signal.aborted,
      () => false,
    );
  for (;;) {
    const outageMs = 500 + random() * 1_500;
    const meanGapMs = (1_250 * (1 - share)) / share;
    if (!(await pause(-Math.log(1 - random()) * meanGapMs))) return outages;
    dns.setFault(TARGET_NAME, 'servfail');
    outages += 1;
    const on = await pause(outageMs);
    dns.setFault(TARGET_NAME, undefined);
    if (!on) return outages;
  }
}

/** Turns every fault on, on the wire: the CaptchaAI stand-in, the target stand-in and the emulator. */
async function armFaults(stack: LocalStack, o: ChaosOptions, keys: string[]): Promise<void> {
  const seed = o.seed;
  stack.captcha.setLostAnswers({
    html502: o.rates.lostHtml502 ? { rate: o.rates.lostHtml502, seed: `${seed}-502` } : null,
    drop: o.rates.lostDrop ? { rate: o.rates.lostDrop, seed: `${seed}-drop` } : null,
    late: o.rates.lostLate ? { rate: o.rates.lostLate, seed: `${seed}-late` } : null,
  });
  stack.site.setFaults({
    dropAfterPost: o.rates.postDropped ? { rate: o.rates.postDropped, seed: `${seed}-post` } : null,
  });
  stack.captcha.setFaults({ neverFinish: o.rates.neverFinish ?? 0 });
  const rules = finalWriteFaults(keys, o.rates.finalWriteFails, seedrandom(`${seed}-final`));
  rules.push(
    ...timeoutWriteFaults(keys, o.rates.timeoutWriteFails ?? 0, seedrandom(`${seed}-timeout-write`)),
  );
  if ((o.rates.stateThrottle ?? 0) > 0) {
    // The state item's reads alone (the worker's, the adjuster's and the operator's): the ledger's
    // lease reads are GetItems of the same table under another key.
    rules.push({
      operation: 'GetItem',
      service: 'dynamodb',
      key: { ...STATE_ITEM_KEY },
      rate: o.rates.stateThrottle ?? 0,
      seed: `${seed}-state-read`,
      error: 'ProvisionedThroughputExceededException',
    });
  }
  if (o.rates.throttle > 0) {
    rules.push({
      operation: 'UpdateItem',
      service: 'dynamodb',
      rate: o.rates.throttle,
      seed: `${seed}-throttle`,
      error: 'ProvisionedThroughputExceededException',
    });
  }
  rules.push(...controlPathFaults(stack, o));
  if (rules.length) await addAwsFaults(stack.awsEnv.AWS_ENDPOINT_URL ?? '', rules);
}

async function ended(stack: LocalStack, bodies: string[], startedAt: number): Promise<boolean> {
  const progress = await progressOf(stack, expectedOutcomes(bodies), startedAt, bodies.length);
  if (!everyRecordFinished(progress)) return false;
  const depth = await queueDepth(stack, stack.outputs.QueueUrl);
  return depth.visible + depth.inFlight === 0;
}

async function unfinished(stack: LocalStack, bodies: string[], keys: string[]): Promise<string[]> {
  const final = new Set(
    [...(await readOutcomesOf(stack, keys, STATUS_FIELDS)).values()]
      .filter((r) => isFinalStatus(r.status))
      .map((r) => r.record_key),
  );
  return bodies.filter((_, i) => !final.has(keys[i] as string));
}

interface Drive {
  stack: LocalStack;
  o: ChaosOptions;
  bodies: string[];
  keys: string[];
  cap: number;
  /** Starts a new runtime process (the newest one is the one killed next). */
  start: () => Promise<void>;
  kill: () => Promise<void>;
  /** The batch to cancel once half of the records ended (`cancelMidRun`). */
  cancelBatch?: string;
}

interface Driven {
  kills: number;
  rotation: KeyRotation;
  timedOut: boolean;
  elapsedS: number;
  /** When the cancel returned (epoch ms), if the run cancelled its batch. */
  cancelledAt?: number;
}

/** Feeds the records and kills the runtime now and then until every record ended and the queue is empty. */
async function drive(d: Drive): Promise<Driven> {
  const { stack, o, bodies, keys, cap } = d;
  const random = seedrandom(String(o.seed));
  const untilKill = () => (o.killMeanS > 0 ? -Math.log(1 - random()) * o.killMeanS * 1000 : Infinity);
  const startedAt = Date.now();
  const deadline = startedAt + o.maxSeconds * 1000;
  let sent = 0;
  let fed = false;
  const feeding = feedQueue(stack, stack.outputs.QueueUrl, bodies, {
    maxQueued: 2 * cap,
    signal: o.signal,
    onSent: (n) => {
      sent = n;
    },
  }).then(() => {
    fed = true;
  });
  let kills = 0;
  let nextKill = Date.now() + untilKill();
  const rotation: KeyRotation = { rotated: false, resumes: 0, redriven: 0, withoutReason: new Set() };
  let cancelledAt: number | undefined;
  let allEnded = false;
  let timedOut = false;
  for (;;) {
    if (o.signal?.aborted) throw new Error('interrupted');
    if (Date.now() > deadline) {
      timedOut = true;
      break;
    }
    if (fed && (await ended(stack, bodies, startedAt))) break;
    // Kills only while records are still being worked (not in the wait for the queue to empty).
    if (Date.now() >= nextKill && kills < o.maxKills && !allEnded) {
      await d.kill();
      kills += 1;
      o.log(`chaos: runtime killed (${kills})`);
      await d.start();
      // Producers are at least once: after a failure they send what has no outcome yet.
      await sendAgain(stack, await unfinished(stack, bodies.slice(0, sent), keys));
      nextKill = Date.now() + untilKill();
    }
    await sleep(1000);
    const p = await progressOf(stack, expectedOutcomes(bodies), startedAt, bodies.length);
    // A third of the way through, the key is rotated; a pause it causes is resumed and redriven.
    if ((o.rates.keyRotation ?? 0) > 0 && !rotation.rotated && p.done >= bodies.length / 3) {
      await rotateKey(stack);
      rotation.rotated = true;
      o.log('chaos: API key rotated (secret and CaptchaAI)');
    }
    if (rotation.rotated) await superviseRotation(stack, rotation, o.log);
    // Half of the way through, one of the two batches is cancelled.
    if (d.cancelBatch !== undefined && cancelledAt === undefined && p.done >= bodies.length / 2) {
      cancelledAt = await cancelBatch(stack, d.cancelBatch);
      o.log(`chaos: batch ${d.cancelBatch} cancelled`);
    }
    allEnded = fed && everyRecordFinished(p);
    o.log(`chaos: ${p.done}/${p.total} ended, in flight ${p.inFlight}/${cap}, kills ${kills}`);
  }
  await feeding;
  return {
    kills,
    rotation,
    timedOut,
    elapsedS: (Date.now() - startedAt) / 1000,
    ...(cancelledAt === undefined ? {} : { cancelledAt }),
  };
}

/** The checker's verdict on the stand-ins' logs and the emulator's state, and the faults counted where they landed. */
async function judge(
  d: Drive,
  logDir: string,
  run: Driven & { poisoned: number; dns?: { standin: DnsStandin; outages: number } },
) {
  const { stack, o, keys, cap } = d;
  const standin = stack.captcha.stats();
  const [rows, dlq, depth, rules] = await Promise.all([
    readOutcomes(stack),
    readDlq(stack),
    queueDepth(stack, stack.outputs.QueueUrl),
    awsFaults(stack.awsEnv.AWS_ENDPOINT_URL ?? ''),
  ]);
  const verdict = checkChaos({
    keys,
    cap,
    // The deployed timings at this time scale (local/stack/local-stack.ts localSettings).
    deadlineMs: DEFAULT_TIMINGS.deadlineMs * o.timeScale,
    cooldownMs: localCooldownMs(o.timeScale),
    captcha: stack.captcha.events(0).entries,
    target: stack.site.events(0).entries,
    rows: new Map(rows.map((r) => [r.record_key, { status: r.status, reason: r.reason }])),
    dlqKeys: dlq.map((e) => e.recordKey ?? e.messageId),
    queueLeft: depth.visible + depth.inFlight,
    logText: logsOf(logDir),
    // Every token the stand-in issues has this shape, so one scan finds any of them (a search
    // for each received token would read the whole log once per record).
    secrets: [stack.apiKey],
    tokenPattern: TOKEN_PATTERN,
    ...(run.cancelledAt === undefined || d.cancelBatch === undefined
      ? {}
      : {
          cancel: {
            keys: new Set(keys.filter((_, i) => i % 2 === 1)),
            at: run.cancelledAt,
            boundMs: cancelRefreshMs(o.timeScale),
          },
        }),
  });
  const failed = (pred: (r: (typeof rules)[number]) => boolean) =>
    rules.filter(pred).reduce((n, r) => n + r.failed, 0);
  const seen = (pred: (r: (typeof rules)[number]) => boolean) =>
    rules.filter(pred).reduce((n, r) => n + r.seen, 0);
  const faults: FaultCounts = {
    lostHtml502: standin.lostAnswers.html502,
    lostDrop: standin.lostAnswers.drop,
    lostLate: standin.lostAnswers.late,
    postDropped: stack.site.stats().droppedAfterPost,
    // The final-write rules are per record (a key); the throttle rule is the one drawn at a rate.
    finalWriteFailed: failed((r) => r.key !== null && r.contains.some((c) => c.includes('submitted'))),
    finalWriteRules: rules.filter((r) => r.key !== null && r.contains.some((c) => c.includes('submitted')))
      .length,
    throttled: failed((r) => r.key === null && r.operation === 'UpdateItem'),
    kills: run.kills,
    timeoutWriteFailed: failed((r) => r.key !== null && r.contains.some((c) => c.includes('failed'))),
    stateThrottled: failed(isStateRead),
    keyRotations: run.rotation.rotated ? 1 : 0,
    resumes: run.rotation.resumes,
    redriven: run.rotation.redriven,
    dlqWithoutReason: run.rotation.withoutReason.size,
    poisonedItems: run.poisoned,
    cancels: run.cancelledAt === undefined ? 0 : 1,
    cancelReadsFailed: failed((r) => r.operation === 'GetItem' && !isStateRead(r)),
    cancelReads: seen((r) => r.operation === 'GetItem' && !isStateRead(r)),
    dnsServfails: run.dns?.standin.queries(TARGET_NAME).filter((q) => q.answered === 'servfail').length ?? 0,
    dnsOutages: run.dns?.outages ?? 0,
    dlqSendsFailed: failed((r) => r.operation === 'SendMessage'),
    dlqSends: seen((r) => r.operation === 'SendMessage'),
  };
  return { verdict, faults };
}

export async function runChaos(o: ChaosOptions): Promise<ChaosResult> {
  const logDir = join(REPO_ROOT, '.local-stack', 'chaos', `${o.seed}-${randomBytes(3).toString('hex')}`);
  const deployStart = Date.now();
  // With DNS outages the workers resolve the target's name through a DNS stand-in (a fresh
  // synth: its port is part of the stack's settings).
  const dns =
    (o.rates.dnsOutage ?? 0) > 0 ? await DnsStandin.start({ [TARGET_NAME]: ['127.0.0.1'] }) : undefined;
  const stack = await startLocalStack({
    threads: o.threads,
    reserve: o.reserve,
    timeScale: o.timeScale,
    runtime: false,
    random: seedrandom(`${o.seed}-latency`),
    logDir,
    onPhase: (m) => o.log(m),
    settings: {
      ...(dns ? { allowedHosts: ['127.0.0.1', 'localhost', TARGET_NAME], dnsServers: [dns.server] } : {}),
      ...(o.lanes === undefined ? {} : { lanes: o.lanes }),
      ...(o.workerMemoryMb === undefined ? {} : { workerMemoryMb: o.workerMemoryMb }),
    },
  }).catch(async (err: unknown) => {
    await dns?.stop();
    throw err;
  });
  const runtimes: RuntimeProcess[] = [];
  const outagesEnd = new AbortController();
  try {
    const deployS = (Date.now() - deployStart) / 1000;
    const worker = await deployedWorker(stack);
    o.log(`chaos: worker ${describeWorker(worker)}`);
    await o.startWhen;
    const cap = computeCap(o.threads, {
      reserve: o.reserve,
      minCap: DEFAULTS.minCap,
      maxCap: capCeiling(o.lanes ?? 1),
    });
    const siteUrl = dns ? stack.site.url.replace('127.0.0.1', TARGET_NAME) : stack.site.url;
    const batches = (o.rates.cancelMidRun ?? 0) > 0 ? batchesOf(o.seed) : undefined;
    // With a cancel mid-run, records alternate between the two batches; odd ones are cancelled.
    const bodies = generatedRecords(siteUrl, stack.site.sitekey, o.records, `chaos-${o.seed}`).map(
      (body, i) =>
        batches
          ? JSON.stringify({ ...JSON.parse(body), batch_id: i % 2 === 1 ? batches.cancelled : batches.kept })
          : body,
    );
    const keys = bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
    await armFaults(stack, o, keys);
    const poisoned = (o.rates.poisonedItems ?? 0) > 0 ? await poisonSolveTimes(stack) : 0;
    const d: Drive = {
      stack,
      o,
      bodies,
      keys,
      cap,
      start: () => spawnRuntimeProcess(localRuntimeOptions(stack)).then((r) => void runtimes.push(r)),
      kill: async () => {
        await runtimes.at(-1)?.kill();
      },
      ...(batches ? { cancelBatch: batches.cancelled } : {}),
    };
    await d.start();
    const outages = dns
      ? dnsOutages(dns, o.rates.dnsOutage ?? 0, o.seed, outagesEnd.signal)
      : Promise.resolve(0);
    const driven = await drive(d);
    outagesEnd.abort();
    const { timedOut, elapsedS } = driven;
    await Promise.all(runtimes.map((r) => r.stop()));
    const { verdict, faults } = await judge(d, logDir, {
      ...driven,
      poisoned,
      ...(dns ? { dns: { standin: dns, outages: await outages } } : {}),
    });
    if (timedOut) verdict.violations.unshift(`the run did not end within ${o.maxSeconds} s`);
    return { ...verdict, seed: o.seed, worker, faults, elapsedS, deployS, logDir, timedOut };
  } finally {
    outagesEnd.abort();
    await Promise.all(runtimes.map((r) => r.kill()));
    await stack.stop();
    await dns?.stop();
  }
}
