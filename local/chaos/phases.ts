import { setTimeout as sleep } from 'node:timers/promises';
import { type AwsRequestEntry, awsRequests } from '../emulator/fault-client.js';
import type { CaptchaEvent } from '../standins/captchaai/wire.js';
import type { Logged } from '../standins/event-log.js';
import type { TargetEvent } from '../standins/target.js';

/**
 * Named phases of one record's flow, seen from outside the code under test: a watcher reads the
 * wire (the emulator's request log, the CaptchaAI stand-in's and the target's event logs) and
 * says when records reached a phase, so a test can SIGKILL the runtime process
 * (local/runtime/child-process.ts) at that moment.
 *
 * - `after-claim`: the claim's UpdateItem (it sets `lease_owner`) was answered 200;
 * - `after-submit`: in.php answered with a task;
 * - `mid-poll`: a res.php for that task answered CAPCHA_NOT_READY;
 * - `after-post`: the form POST reached the target (it may still be answering);
 * - `before-final-write`: a final write was failed by an emulator fault rule the caller added
 *   (e.g. `{operation: 'UpdateItem', key: {record_key}, contains: ['":status":{"S":"submitted"}'], times: 0}`),
 *   so the record posted and its outcome is not written.
 */
export const PHASES = [
  'after-claim',
  'after-submit',
  'mid-poll',
  'after-post',
  'before-final-write',
] as const;
export type Phase = (typeof PHASES)[number];

type Feed<T> = (
  since: number,
) => { next: number; entries: Logged<T>[] } | Promise<{ next: number; entries: T[] }>;

export interface WireSources {
  captchaEvents: Feed<CaptchaEvent>;
  targetEvents: Feed<TargetEvent>;
  /** The moto launcher's endpoint, for its request log. */
  awsEndpoint: string;
}

function awsPhase(phase: Phase, e: AwsRequestEntry): string | undefined {
  if (!e.op.endsWith('.UpdateItem')) return undefined;
  const key = e.key?.record_key;
  if (phase === 'after-claim' && e.status === 200 && e.update?.includes('lease_owner = :owner')) return key;
  if (phase === 'before-final-write' && e.fault !== undefined) return key;
  return undefined;
}

function captchaPhase(phase: Phase, e: CaptchaEvent): string | undefined {
  if (phase === 'after-submit' && e.kind === 'in.php' && e.taskId !== undefined && !e.lost) return e.record;
  if (phase === 'mid-poll' && e.kind === 'res.php' && e.answer === 'CAPCHA_NOT_READY') return e.record;
  return undefined;
}

/**
 * Resolves with the records of `keys` that reached `phase` (in the order they did) as soon as at
 * least `atLeast` have, reading only what happened after this call began.
 */
export async function untilPhase(
  sources: WireSources,
  phase: Phase,
  keys: Iterable<string>,
  { atLeast = 1, timeoutMs = 120_000, intervalMs = 10 } = {},
): Promise<string[]> {
  const wanted = new Set(keys);
  const reached: string[] = [];
  const note = (key: string | undefined) => {
    if (key !== undefined && wanted.has(key) && !reached.includes(key)) reached.push(key);
  };
  const onAws = phase === 'after-claim' || phase === 'before-final-write';
  let since = onAws
    ? (await awsRequests(sources.awsEndpoint, Number.MAX_SAFE_INTEGER)).next
    : phase === 'after-post'
      ? (await sources.targetEvents(Number.MAX_SAFE_INTEGER)).next
      : (await sources.captchaEvents(Number.MAX_SAFE_INTEGER)).next;
  const end = Date.now() + timeoutMs;
  while (reached.length < atLeast) {
    if (Date.now() > end)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${atLeast} record(s) at ${phase}`);
    if (onAws) {
      const out = await awsRequests(sources.awsEndpoint, since);
      since = out.next;
      for (const e of out.entries) note(awsPhase(phase, e));
    } else if (phase === 'after-post') {
      const out = await sources.targetEvents(since);
      since = out.next;
      for (const e of out.entries) if (e.kind === 'post-received') note(e.record);
    } else {
      const out = await sources.captchaEvents(since);
      since = out.next;
      for (const e of out.entries) note(captchaPhase(phase, e));
    }
    if (reached.length < atLeast) await sleep(intervalMs);
  }
  return reached;
}
