import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { BatchGetCommand, DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { mockClient } from 'aws-sdk-client-mock';
import { describe, expect, it } from 'vitest';
import { progressLine } from '../../../../cli/commands/local.js';
import type { LocalStack } from '../../../../local/stack/local-stack.js';
import { progressOf } from '../../../../local/stack/run.js';

/** Just what progressOf reads: the run's outcome rows by key, DLQ depth, pipeline state, cap, stand-in counts. */
function stackWithRows(
  rows: Record<string, unknown>[],
  table: string,
  laneShape?: { cap: number; r: number; L: number },
): LocalStack {
  const documents = DynamoDBDocumentClient.from(new DynamoDBClient({ region: 'us-east-1' }));
  mockClient(documents)
    .on(BatchGetCommand)
    .callsFake((input: { RequestItems: Record<string, { Keys: { record_key: string }[] }> }) => {
      const asked = new Set(input.RequestItems[table]?.Keys.map((k) => k.record_key));
      return { Responses: { [table]: rows.filter((r) => asked.has(r.record_key as string)) } };
    });
  return {
    outputs: {
      TableName: table,
      DlqUrl: 'dlq',
      MappingUuid: 'm',
      WorkerFunctionName: 'worker',
    },
    lambda: { send: async () => ({ ReservedConcurrentExecutions: 6 }) },
    documents,
    sqs: {
      send: async () => ({
        Attributes: { ApproximateNumberOfMessages: '1', ApproximateNumberOfMessagesNotVisible: '0' },
      }),
    },
    control: {
      readState: async () => ({ paused: false }),
      readMapping: async () => ({ enabled: true, maximumConcurrency: 6 }),
      // With lanes, the shape published (the worker's LANES); none with one lane.
      readShape: async () => (laneShape ? { ...laneShape, since: 0 } : undefined),
    },
    runtime: undefined,
    captcha: { stats: () => ({ inFlight: 2, threads: 8 }) },
  } as unknown as LocalStack;
}

describe('local run progress', () => {
  it('never counts a row without a status (moto shows a claim half-written) as "undefined"', async () => {
    // Prepare: a claim caught between moto storing the bare key and applying its SET.
    const stack = stackWithRows(
      [
        { record_key: 'a', status: 'in_progress' },
        { record_key: 'b', status: 'submitted' },
        { record_key: 'c' },
      ],
      'outcomes-half-written',
    );

    // Act
    const progress = await progressOf(stack, { keys: new Set(['a', 'b', 'c']), unkeyed: 1 }, Date.now(), 4);
    const line = progressLine(progress);

    // Assess
    expect(progress.outcomes).toEqual({ in_progress: 1, submitted: 1 });
    expect(progress.done).toBe(2); // one submitted + one DLQ message
    expect(line).not.toContain('undefined');
    expect(line).toContain('in_progress 1, submitted 1');
  });

  it('counts the cap in solves with lanes: the knobs hold r invocations of L lanes', async () => {
    // Prepare: cap 12 as 3 invocations of 4 lanes; the knobs (reserved concurrency, the mapping) say 3.
    const stack = stackWithRows([{ record_key: 'a', status: 'in_progress' }], 'outcomes-lanes', {
      cap: 12,
      r: 3,
      L: 4,
    });
    (stack.lambda as unknown as { send: () => Promise<unknown> }).send = async () => ({
      ReservedConcurrentExecutions: 3,
    });
    (stack.control as unknown as { readMapping: () => Promise<unknown> }).readMapping = async () => ({
      enabled: true,
      maximumConcurrency: 3,
    });

    // Act
    const progress = await progressOf(stack, { keys: new Set(['a']), unkeyed: 0 }, Date.now(), 1);

    // Assess: 12 solves may be in flight, not 3.
    expect(progress.cap).toBe(12);
    expect(progressLine(progress)).toContain('cap 12');
  });
});
