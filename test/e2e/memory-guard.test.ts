import { GetFunctionConfigurationCommand } from '@aws-sdk/client-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MEASURED_RSS_HEADROOM } from '../../bench/report/costs.js';
import { DEFAULTS } from '../../functions/common/settings.js';
import { lambdaNode } from '../../local/runtime/lambda-node.js';
import type { LocalStack } from '../../local/stack/local-stack.js';
import { generatedRecords, withLargePages } from '../../local/stack/records.js';
import { runRecords } from '../../local/stack/run.js';
import { allFinished, startE2eStack, uniquePrefix } from './harness.js';
import { e2eTarget } from './target.js';

// The memory guard (docs/benchmark-notes.md "Worker memory"): the worker's default memory rests on a
// measured peak RSS, so a change that bloats the worker (a large dependency or buffer loaded at
// start, memory kept from record to record) must fail here, not in a Lambda that is stopped for
// passing its memory. Each execution environment is a Node 22 process of its own under the heap
// flags Lambda gives the deployed memory (THREADGATE_LOCAL_ENVIRONMENTS=process), and its peak
// RSS (the operating system's maxRSS, what Lambda's "Max Memory Used" reports) must stay within
// the 3/4 of the memory the default allows (bench/report/costs.ts MEASURED_RSS_HEADROOM). A memory
// bound, not a timing test: how long the run takes, or what runs beside it, does not matter.
//
// Its own stack, not the shared one: the environments must be processes, and the plan is 2
// threads with no reserve (cap 2: two environments, as the bench's memory runs), so the deployed
// cap differs and the assembly is synthesized apart from the other files'.
const RECORDS = 200;
/** Every tenth record loads a page just under the worker's page-size cap: the worst case. */
const LARGE_PAGE_SHARE = 0.1;
const PLAN = { threads: 2, reserve: 0 } as const;
const MB = 1024 * 1024;
/** The deploy is the file's hook; the run itself takes 1–2 minutes on a loaded two-core machine. */
const RUN_TIMEOUT_MS = 300_000;
/** Lambda's Node for Linux: npm installs it on Linux x64 and arm64 only; elsewhere nothing is measured. */
const LAMBDA_NODE = lambdaNode();
if ('missing' in LAMBDA_NODE) process.stdout.write(`memory guard: not run: ${LAMBDA_NODE.missing}\n`);

describe.skipIf(e2eTarget() !== 'moto' || 'missing' in LAMBDA_NODE)(
  'e2e: the worker stays within its memory budget (process-isolated, Node 22, Lambda heap flags)',
  () => {
    let stack: LocalStack;

    beforeAll(async () => {
      // Read once per function when the local runtime starts (local/runtime/function-host.ts), so it
      // is set only while this stack starts: the e2e project is not isolated, and another file's
      // stack in this worker must keep its worker threads.
      const isolation = process.env.THREADGATE_LOCAL_ENVIRONMENTS;
      process.env.THREADGATE_LOCAL_ENVIRONMENTS = 'process';
      try {
        stack = await startE2eStack('memory-guard', PLAN);
      } finally {
        if (isolation === undefined) delete process.env.THREADGATE_LOCAL_ENVIRONMENTS;
        else process.env.THREADGATE_LOCAL_ENVIRONMENTS = isolation;
      }
    });

    afterAll(async () => {
      await stack?.stop();
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
        await runRecords(stack, bodies, { maxQueued: 10, timeoutMs: 240_000 });

        // Assess
        expect(await allFinished(stack, bodies)).toBe(true);
        const environments = stack.runtime?.stats().functions[name]?.memory.environments ?? [];
        expect(environments.length).toBeGreaterThan(0);
        const mb = (bytes: number | undefined) => Math.round(((bytes ?? Number.NaN) / MB) * 10) / 10;
        const peaks = environments.map((e) => ({
          environment: e.id,
          invocations: e.invocations ?? 0,
          peakRssMb: mb(e.peakRss),
          peakHeapUsedMb: mb(e.peakHeapUsed),
          peakHeapTotalMb: mb(e.peakHeapTotal),
        }));
        // The figures, for the record (the assertion names only the first environment over the budget).
        process.stdout.write(
          `memory guard: budget ${budgetMb.toFixed(1)} MB (3/4 of ${DEFAULTS.workerMemoryMb} MB); ${JSON.stringify(peaks)}\n`,
        );
        for (const p of peaks) {
          // No peak RSS: the environment was a worker thread, not a process, and nothing was measured.
          expect(p.peakRssMb, `environment ${p.environment}: no peak RSS (not a process)`).not.toBeNaN();
          expect(
            p.peakRssMb,
            `environment ${p.environment} after ${p.invocations} invocations`,
          ).toBeLessThanOrEqual(budgetMb);
        }
      },
      RUN_TIMEOUT_MS,
    );
  },
);
