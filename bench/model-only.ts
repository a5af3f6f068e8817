import { DEFAULT_POLL_SCHEDULE } from '../functions/captchaai/poll-schedule.js';
import { DEFAULT_TIMINGS } from '../functions/captchaai/timings.js';
import type { CaptchaType } from '../functions/captchaai/types.js';
import { captchaTypeOf, validateJobMessage } from '../functions/records/job-schema.js';
import { generatedRecords, type RecordMix } from '../local/stack/records.js';
import {
  DEFAULT_LATENCY,
  formatLatency,
  type LatencyDistribution,
} from '../local/standins/captchaai/latency.js';
import { formatLanesModel, type LanesModel, lanesModel } from './lanes-model.js';
import { drawSolveTimes, type ModelFigures, modelFigures } from './simulate.js';

/**
 * `threadgate bench --model-only`: the limit and both poll schedules simulated on the draws a
 * bench with the same records, mix, latency and seed would make, without starting anything
 * (a second; the figures the full run reports beside its measurement). With `lanes` (or a take
 * window), also lanes 1 and lanes K on the same draws with the invocations' tail
 * (./lanes-model.ts), at today's take window and at the one asked for.
 */
export function benchModel(o: {
  threads: number;
  cap: number;
  records: number;
  seed: number;
  mix?: RecordMix;
  latency?: Partial<Record<CaptchaType, LatencyDistribution>>;
  lanes?: number;
  takeWindowSeconds?: number;
}): { latency: Record<string, string>; figures: ModelFigures; lanes?: LanesModel } {
  const latency = { ...DEFAULT_LATENCY, ...o.latency };
  const types = generatedRecords('https://bench.invalid/form', 'sitekey', o.records, 'model', o.mix).map(
    (body) => {
      const v = validateJobMessage(body);
      if (!v.ok) throw new Error(`generated record is invalid: ${v.reason}`);
      return captchaTypeOf(v.job);
    },
  );
  const figures = modelFigures({
    types,
    latency,
    seed: o.seed,
    slots: o.cap,
    threads: o.threads,
    timings: DEFAULT_TIMINGS,
    settings: DEFAULT_POLL_SCHEDULE,
  });
  const used = [...new Set(types)];
  const wantLanes = o.lanes !== undefined || o.takeWindowSeconds !== undefined;
  return {
    latency: Object.fromEntries(used.map((t) => [t, formatLatency(latency[t])])),
    figures,
    ...(wantLanes
      ? {
          lanes: lanesModel({
            tasks: drawSolveTimes(types, latency, o.seed),
            cap: o.cap,
            threads: o.threads,
            lanes: o.lanes ?? 1,
            ...(o.takeWindowSeconds === undefined ? {} : { askedWindowMs: o.takeWindowSeconds * 1000 }),
          }),
        }
      : {}),
  };
}

/** The model's figures as a few lines of text. */
export function formatModel(m: ReturnType<typeof benchModel>): string {
  const f = (v: number, d = 3) => (Number.isFinite(v) ? v.toFixed(d) : 'n/a');
  const { limit, schedules } = m.figures;
  const lines = [
    `latency: ${Object.entries(m.latency)
      .map(([t, d]) => `${t}=${d}`)
      .join(' ')}`,
    `limit (ideal client on these draws): ${f(limit)}`,
  ];
  for (const [mode, r] of Object.entries(schedules)) {
    lines.push(
      `${mode.padEnd(7)} schedule: ${f(r.efficiency)} = ${f(r.efficiency / limit)} of the limit; ${f(r.resPhpPerSolve, 2)} res.php per solve (max ${r.resPhpMaxPerTask}), mean wait ${f(r.meanWaitMs, 0)} ms, ${r.timedOut} read at no poll`,
    );
  }
  const inf = m.figures.informed;
  lines.push(
    `learned schedule told the true distribution from the first task: ${f(inf.efficiency)} = ${f(inf.efficiency / limit)} of the limit; ${f(inf.resPhpPerSolve, 2)} res.php per solve (max ${inf.resPhpMaxPerTask}), mean wait ${f(inf.meanWaitMs, 0)} ms`,
  );
  return `${lines.join('\n')}\n${m.lanes ? formatLanesModel(m.lanes) : ''}`;
}
