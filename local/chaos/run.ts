import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { SendMessageBatchCommand } from '@aws-sdk/client-sqs';
import seedrandom from 'seedrandom';
import { DEFAULT_TIMINGS } from '../../functions/captchaai/timings.js';
import { DEFAULTS } from '../../functions/common/settings.js';
import { computeCap } from '../../functions/pipeline/cap-policy.js';
import { REPO_ROOT } from '../emulator/deploy.js';
import { addAwsFaults, awsFaults } from '../emulator/fault-client.js';
import { type RuntimeProcess, spawnRuntimeProcess } from '../runtime/child-process.js';
import { type LocalStack, localRuntimeOptions, startLocalStack } from '../stack/local-stack.js';
import { queueDepth, readDlq, readOutcomes } from '../stack/observation.js';
import { expectedOutcomes, generatedRecords } from '../stack/records.js';
import { everyRecordFinished, feedQueue, progressOf } from '../stack/run.js';
import { type ChaosVerdict, checkChaos } from './check.js';
import { type ChaosOptions, type FaultCounts, finalWriteFaults } from './plan.js';

/**
 * The chaos run: N records through the local stack while faults are drawn at random (seeded)
 * on the wire — in.php answers lost after the task was created (a 502 page, a dropped
 * connection, an answer after the client's timeout), form POSTs taken and their answers
 * dropped, DynamoDB writes throttled and final writes failing (a few times, or for good) — and
 * the runtime process is SIGKILLed and restarted now and then, the producers sending the
 * unfinished records again. Afterwards the checker (./check.ts) judges the stand-ins' own logs.
 */
export interface ChaosResult extends ChaosVerdict {
  seed: number;
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

/** Turns every fault on, on the wire: the CaptchaAI stand-in, the target stand-in and the emulator. */
async function armFaults(stack: LocalStack, o: ChaosOptions, keys: string[]): Promise<number> {
  const seed = o.seed;
  stack.captcha.setLostAnswers({
    html502: o.rates.lostHtml502 ? { rate: o.rates.lostHtml502, seed: `${seed}-502` } : null,
    drop: o.rates.lostDrop ? { rate: o.rates.lostDrop, seed: `${seed}-drop` } : null,
    late: o.rates.lostLate ? { rate: o.rates.lostLate, seed: `${seed}-late` } : null,
  });
  stack.site.setFaults({
    dropAfterPost: o.rates.postDropped ? { rate: o.rates.postDropped, seed: `${seed}-post` } : null,
  });
  const rules = finalWriteFaults(keys, o.rates.finalWriteFails, seedrandom(`${seed}-final`));
  if (o.rates.throttle > 0) {
    rules.push({
      operation: 'UpdateItem',
      service: 'dynamodb',
      rate: o.rates.throttle,
      seed: `${seed}-throttle`,
      error: 'ProvisionedThroughputExceededException',
    });
  }
  if (rules.length) await addAwsFaults(stack.awsEnv.AWS_ENDPOINT_URL ?? '', rules);
  return rules.length;
}

async function ended(stack: LocalStack, bodies: string[], startedAt: number): Promise<boolean> {
  const progress = await progressOf(stack, expectedOutcomes(bodies), startedAt, bodies.length);
  if (!everyRecordFinished(progress)) return false;
  const depth = await queueDepth(stack, stack.outputs.QueueUrl);
  return depth.visible + depth.inFlight === 0;
}

async function unfinished(stack: LocalStack, bodies: string[], keys: string[]): Promise<string[]> {
  const final = new Set(
    (await readOutcomes(stack))
      .filter((r) => ['submitted', 'failed', 'rejected'].includes(r.status))
      .map((r) => r.record_key),
  );
  return bodies.filter((_, i) => !final.has(keys[i] as string));
}

export async function runChaos(o: ChaosOptions): Promise<ChaosResult> {
  const random = seedrandom(String(o.seed));
  const logDir = join(REPO_ROOT, '.local-stack', 'chaos', `${o.seed}-${randomBytes(3).toString('hex')}`);
  const deployStart = Date.now();
  const stack = await startLocalStack({
    threads: o.threads,
    reserve: o.reserve,
    timeScale: o.timeScale,
    runtime: false,
    random: seedrandom(`${o.seed}-latency`),
    logDir,
    onPhase: (m) => o.log(m),
  });
  const runtimes: RuntimeProcess[] = [];
  try {
    const deployS = (Date.now() - deployStart) / 1000;
    const cap = computeCap(o.threads, {
      reserve: o.reserve,
      minCap: DEFAULTS.minCap,
      maxCap: DEFAULTS.maxCap,
    });
    const bodies = generatedRecords(stack.site.url, stack.site.sitekey, o.records, `chaos-${o.seed}`);
    const keys = bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
    const finalWriteRules = await armFaults(stack, o, keys);
    const start = () => spawnRuntimeProcess(localRuntimeOptions(stack)).then((r) => runtimes.push(r));
    await start();
    const startedAt = Date.now();
    const deadline = startedAt + o.maxSeconds * 1000;
    const feeding = feedQueue(stack, stack.outputs.QueueUrl, bodies, {
      maxQueued: 2 * cap,
      signal: o.signal,
    });
    let kills = 0;
    let nextKill = o.killMeanS > 0 ? Date.now() + -Math.log(1 - random()) * o.killMeanS * 1000 : Infinity;
    let timedOut = false;
    let fed = false;
    void feeding.then(() => {
      fed = true;
    });
    for (;;) {
      if (o.signal?.aborted) throw new Error('interrupted');
      if (Date.now() > deadline) {
        timedOut = true;
        break;
      }
      if (fed && (await ended(stack, bodies, startedAt))) break;
      if (Date.now() >= nextKill && kills < o.maxKills) {
        await runtimes.at(-1)?.kill();
        kills += 1;
        o.log(`chaos: runtime killed (${kills})`);
        await start();
        // Producers are at least once: after a failure they send what has no outcome yet.
        if (fed) await sendAgain(stack, await unfinished(stack, bodies, keys));
        nextKill = Date.now() + -Math.log(1 - random()) * o.killMeanS * 1000;
      }
      await sleep(1000);
      const p = await progressOf(stack, expectedOutcomes(bodies), startedAt, bodies.length);
      o.log(`chaos: ${p.done}/${p.total} ended, in flight ${p.inFlight}/${cap}, kills ${kills}`);
    }
    await feeding;
    const elapsedS = (Date.now() - startedAt) / 1000;
    const standin = stack.captcha.stats();
    const [rows, dlq, depth, rules] = await Promise.all([
      readOutcomes(stack),
      readDlq(stack),
      queueDepth(stack, stack.outputs.QueueUrl),
      awsFaults(stack.awsEnv.AWS_ENDPOINT_URL ?? ''),
    ]);
    await Promise.all(runtimes.map((r) => r.stop()));
    const verdict = checkChaos({
      keys,
      cap,
      // The deployed timings at this time scale (local/stack/local-stack.ts localSettings).
      deadlineMs: DEFAULT_TIMINGS.deadlineMs * o.timeScale,
      cooldownMs: Math.round(DEFAULTS.cooldownMs * o.timeScale),
      captcha: stack.captcha.events(0).entries,
      target: stack.site.events(0).entries,
      rows: new Map(rows.map((r) => [r.record_key, { status: r.status, reason: r.reason }])),
      dlqKeys: dlq.map((d) => d.recordKey ?? d.messageId),
      queueLeft: depth.visible + depth.inFlight,
      logText: logsOf(logDir),
      // Every token the stand-in issues has this shape, so one scan finds any of them (a search
      // for each received token would read the whole log once per record).
      secrets: [stack.apiKey],
      tokenPattern: TOKEN_PATTERN,
    });
    if (timedOut) verdict.violations.unshift(`the run did not end within ${o.maxSeconds} s`);
    const failed = (pred: (r: (typeof rules)[number]) => boolean) =>
      rules.filter(pred).reduce((n, r) => n + r.failed, 0);
    return {
      ...verdict,
      seed: o.seed,
      faults: {
        lostHtml502: standin.lostAnswers.html502,
        lostDrop: standin.lostAnswers.drop,
        lostLate: standin.lostAnswers.late,
        postDropped: stack.site.stats().droppedAfterPost,
        finalWriteFailed: failed((r) => r.contains.length > 0),
        finalWriteRules,
        throttled: failed((r) => r.error === 'ProvisionedThroughputExceededException'),
        kills,
      },
      elapsedS,
      deployS,
      logDir,
      timedOut,
    };
  } finally {
    await Promise.all(runtimes.map((r) => r.kill()));
    await stack.stop();
  }
}
