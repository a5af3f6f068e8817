import type { LambdaClient } from '@aws-sdk/client-lambda';
import { describe, expect, it } from 'vitest';
import { type AdjustCapDeps, adjustCap } from '../../../../functions/pipeline/cap.js';
import type { MappingInfo, PipelineControl } from '../../../../functions/pipeline/control.js';
import { DRAIN_CLOCK_MARGIN_MS, type PublishedShape } from '../../../../functions/pipeline/lanes.js';

/**
 * adjustCap and the slot ledger: the plan's cap reaches the ledger before any knob or the shape,
 * so that a fall bounds every lease the drain counts as new, however long the knobs and the shape
 * take to land (docs/design.md, "The slot ledger"). Written after them, an invocation that started
 * once the drain's margin had passed and took its lease before the ledger's write got its whole L
 * under the old cap beside the drain's lanes. The knobs, the shape and the ledger are fakes that
 * record the order of the writes on one clock.
 */
/** A fall's writes after the ledger's: the mapping, the reservation, then the shape with its drain. */
const KNOBS_FALL = ['UpdateEventSourceMapping', 'PutFunctionConcurrency', 'shape'];

describe('adjustCap with the slot ledger', () => {
  /** A lanes-4 deployment at cap 12 (3 × 4) whose ledger write takes `ledgerMs` on the fake clock. */
  function world(o: { ledgerMs: number; ledgerFails?: boolean; shape?: PublishedShape }) {
    let clock = 1_000_000;
    const writes: { what: string; at: number }[] = [];
    const warnings: string[] = [];
    let published: PublishedShape | undefined;
    const mapping: MappingInfo = { uuid: 'm-1', enabled: true, state: 'Enabled', maximumConcurrency: 3 };
    const lambda = {
      send: async (command: { constructor: { name: string } }) => {
        const name = command.constructor.name.replace(/Command$/, '');
        if (name === 'GetFunctionConcurrency') return { ReservedConcurrentExecutions: 3 };
        writes.push({ what: name, at: clock });
        return {};
      },
    } as unknown as LambdaClient;
    const control = {
      readState: async () => ({ paused: false }),
      readMapping: async () => mapping,
      readShape: async () => o.shape ?? { cap: 12, r: 3, L: 4, since: 0 },
      writeShape: async (shape: PublishedShape) => {
        published = shape;
        writes.push({ what: 'shape', at: clock });
      },
    } as unknown as PipelineControl;
    const deps = (threads: number): AdjustCapDeps => ({
      lambda,
      control,
      workerFunctionName: 'worker',
      readThreads: async () => ({ threads, workingThreads: 0 }),
      settings: { reserve: 2, minCap: 1, maxCap: 4_000 },
      lanes: { lanes: 4, workerTimeoutMs: 900_000, settleMs: 4_000, now: () => clock },
      ledger: {
        setCap: async (cap: number) => {
          clock += o.ledgerMs;
          if (o.ledgerFails) throw new Error('throttled');
          writes.push({ what: `ledger ${cap}`, at: clock });
        },
      },
      logger: { info() {}, warn: (message) => warnings.push(message) },
    });
    return { deps, writes, warnings, published: () => published };
  }

  it('a fall: the ledger gets the new cap before the knobs and the shape, and the drain counts from after it', async () => {
    // Prepare: the plan falls to 8 threads (cap 6, 2 × 3); the ledger's write takes 3 s
    const w = world({ ledgerMs: 3_000 });
    // Act
    const result = await adjustCap(w.deps(8));
    // Assess
    expect(result.outcome).toBe('changed');
    expect(w.writes.map((x) => x.what)).toEqual(['ledger 6', ...KNOBS_FALL]);
    const ledgerAt = w.writes[0]!.at;
    // Any invocation the drain counts as new started after the ledger held the new cap.
    expect(w.published()).toMatchObject({ cap: 6, r: 2, L: 3, drain: { L: 2, fromR: 3 } });
    expect(w.published()?.drain?.startedBefore).toBeGreaterThanOrEqual(ledgerAt + DRAIN_CLOCK_MARGIN_MS);
  });

  it('a grow: the ledger gets the new cap first too (the plan already has the threads)', async () => {
    // Prepare: the plan grows to 20 threads (cap 18, 3 × 6 from 3 × 4: r unchanged)
    const w = world({ ledgerMs: 10 });
    // Act
    await adjustCap(w.deps(20));
    // Assess
    expect(w.writes[0]?.what).toBe('ledger 18');
    expect(w.published()).toMatchObject({ cap: 18 });
  });

  it('a ledger write that fails is logged and the knobs still fall', async () => {
    // Prepare
    const w = world({ ledgerMs: 0, ledgerFails: true });
    // Act
    const result = await adjustCap(w.deps(8));
    // Assess
    expect(result.outcome).toBe('changed');
    expect(w.writes.map((x) => x.what)).toEqual(KNOBS_FALL);
    expect(w.warnings.some((m) => m.includes('slot ledger'))).toBe(true);
  });
});
