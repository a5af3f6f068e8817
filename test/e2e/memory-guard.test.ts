import { GetFunctionConfigurationCommand } from '@aws-sdk/client-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MEASURED_RSS_HEADROOM } from '../../bench/report/costs.js';
import { DEFAULTS } from '../../functions/common/settings.js';
import type { LocalStack } from '../../local/stack/local-stack.js';
import { generatedRecords, withLargePages } from '../../local/stack/records.js';
import { runRecords } from '../../local/stack/run.js';
import { allFinished, startE2eStack, uniquePrefix } from './harness.js';

// The memory guard (docs/benchmark.md "Worker memory"): the worker's default memory rests on a
// measured peak RSS, so a change that bloats the worker (one more SDK client loaded at start, a
// large dependency, an unbounded buffer) must fail here, not in a Lambda that is stopped for
// passing its memory. Each execution environment is a Node 22 process of its own under the heap
// flags Lambda gives the deployed memory (THREADGATE_LOCAL_ENVIRONMENTS=process), and its peak
// RSS (the operating system's maxRSS, what Lambda's "Max Memory Used" reports) must stay within
// the 3/4 of the memory the default allows. A memory bound, not a timing test: how long the run
// takes does not matter, every environment's peak does.
const RECORDS = 300;
/** Every tenth record loads a page just under the worker's page-size cap: the worst case. */
const LARGE_PAGE_SHARE = 0.1;
const MB = 1024 * 1024;
/** The deploy is the file's hook; the run itself takes 1–3 minutes on a loaded two-core machine. */
const RUN_TIMEOUT_MS = 300_000;

describe('e2e: the worker stays within its memory budget (process-isolated, Node 22, Lambda heap flags)', () => {
  let stack: LocalStack;
  const isolation = process.env.THREADGATE_LOCAL_ENVIRONMENTS;

  beforeAll(async () => {
    // The local runtime reads it when it creates each function's host.
    process.env.THREADGATE_LOCAL_ENVIRONMENTS = 'process';
    stack = await startE2eStack('memory-guard');
  });

  afterAll(async () => {
    await stack?.stop();
    if (isolation === undefined) delete process.env.THREADGATE_LOCAL_ENVIRONMENTS;
    else process.env.THREADGATE_LOCAL_ENVIRONMENTS = isolation;
  });

  it(
    `peaks within 3/4 of the default memory over ${RECORDS} records of every type, large pages among them`,
    async () => {
      // Prepare
      const name = stack.outputs.WorkerFunctionName;
      const deployed = await stack.lambda.send(new GetFunctionConfigurationCommand({ FunctionName: name }));
      expect(deployed.MemorySize).toBe(DEFAULTS.workerMemoryMb);
      const budgetMb = DEFAULTS.workerMemoryMb / MEASURED_RSS_HEADROOM;
      const bodies = withLargePages(
        generatedRecords(stack.site.url, stack.site.sitekey, RECORDS, uniquePrefix('memory')),
        LARGE_PAGE_SHARE,
      );

      // Act
      await runRecords(stack, bodies, { maxQueued: 20, timeoutMs: 240_000 });

      // Assess
      expect(await allFinished(stack, bodies)).toBe(true);
      const environments = stack.runtime?.stats().functions[name]?.memory.environments ?? [];
      expect(environments.length).toBeGreaterThan(0);
      const peaks = environments.map((e) => ({
        environment: e.id,
        invocations: e.invocations ?? 0,
        peakRssMb: Math.round(((e.peakRss ?? Number.NaN) / MB) * 10) / 10,
      }));
      // The figures, for the record (the assertion names only the first environment over the budget).
      process.stdout.write(
        `memory guard: budget ${budgetMb.toFixed(1)} MB (3/4 of ${DEFAULTS.workerMemoryMb} MB); ${JSON.stringify(peaks)}\n`,
      );
      for (const p of peaks) {
        expect(
          p.peakRssMb,
          `environment ${p.environment} after ${p.invocations} invocations`,
        ).toBeLessThanOrEqual(budgetMb);
      }
    },
    RUN_TIMEOUT_MS,
  );
});
