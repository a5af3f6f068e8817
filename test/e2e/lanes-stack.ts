import { laneShape, type PublishedShape } from '../../functions/pipeline/lanes.js';
import { type RuntimeProcess, spawnRuntimeProcess } from '../../local/runtime/child-process.js';
import { type LocalStack, localRuntimeOptions } from '../../local/stack/local-stack.js';
import { startE2eStack } from './harness.js';

/**
 * The deployed stack of the lanes proofs (test/e2e/lanes.test.ts, and the fleet kills of
 * crash-cap.test.ts): moto, the real CDK app with `lanes` 4 (or as asked), the local runtime in
 * a process of its own so the fleet can be killed. A plan of 14 threads with reserve 2 is cap 12,
 * carried by r = 3 invocations of L = 4 lanes.
 */
export const LANES = 4;
export const PLAN = { threads: 14, reserve: 2 } as const;
export const CAP = PLAN.threads - PLAN.reserve;
export const SHAPE = laneShape(CAP, LANES);
/**
 * Lanes beyond the first take their messages with the chain, and at this time scale the default
 * window is 1.2 s (120 s × 0.01), less than an invocation's warm-up here: 15 s keeps the lanes
 * taking messages while the tests watch them.
 */
export const SETTINGS = { lanes: LANES, chainSeconds: 15 };

/** A lanes stack and its runtime processes (a killed one is replaced by a new one). */
export class LanesStack {
  readonly #runtimes: RuntimeProcess[] = [];
  private constructor(readonly stack: LocalStack) {}

  /**
   * `lanes` (default LANES), `timeScale` (default the suite's 0.01) and the plan's `threads`
   * (default PLAN's; the reserve stays PLAN's) for a stack of other shape.
   */
  static async start(
    name: string,
    o: { lanes?: number; timeScale?: number; threads?: number } = {},
  ): Promise<LanesStack> {
    const settings = { ...SETTINGS, lanes: o.lanes ?? LANES };
    const timeScale = o.timeScale === undefined ? {} : { timeScale: o.timeScale };
    const threads = o.threads === undefined ? {} : { threads: o.threads };
    const lanes = new LanesStack(
      await startE2eStack(name, { ...PLAN, ...threads, runtime: false, settings, ...timeScale }),
    );
    await lanes.startRuntime();
    return lanes;
  }

  async startRuntime(): Promise<void> {
    this.#runtimes.push(await spawnRuntimeProcess(localRuntimeOptions(this.stack)));
  }

  /** SIGKILLs the running runtime: every environment and lane at once. */
  async killRuntime(): Promise<void> {
    await this.#runtimes.at(-1)?.kill();
  }

  async stop(): Promise<void> {
    await Promise.all(this.#runtimes.map((r) => r.kill()));
    await this.stack.stop();
  }

  /** The lane shape as the workers read it: the adjuster's, or the first one until it publishes. */
  publishedShape(): Promise<PublishedShape | undefined> {
    return this.stack.control.readShape();
  }

  /** In.php calls (with a task) and POSTs per record of `keys`, from the stand-ins' own logs. */
  wireCounts(keys: string[]): { inPhp: Map<string, number>; posts: Map<string, number> } {
    const mine = new Set(keys);
    const count = (entries: { record: string }[]) => {
      const m = new Map<string, number>();
      for (const e of entries) if (mine.has(e.record)) m.set(e.record, (m.get(e.record) ?? 0) + 1);
      return m;
    };
    return {
      inPhp: count(
        this.stack.captcha.events(0).entries.filter((e) => e.kind === 'in.php' && e.taskId !== undefined),
      ),
      posts: count(this.stack.site.events(0).entries.filter((e) => e.kind === 'post-received')),
    };
  }
}

/** Keys of generated record bodies. */
export const keysOf = (bodies: string[]) =>
  bodies.map((b) => (JSON.parse(b) as { record_key: string }).record_key);
